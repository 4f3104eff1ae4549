# The control-plane wire format between the controller and its workers.
# Every ZeroMQ payload frame is one `Message`; bulk bytes (tensors) travel as extra
# frames whose sizes the message declares in `attachments`, never inside the text.
@0xc4e8f1d2a3b59e61;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tandem::wire");

# 2: command and reply bodies are Cap'n Proto structs (each role's .capnp), not JSON.
const protocolVersion :UInt32 = 2;

struct WorkerId {
  role @0 :Text;   # "rollout", "learner", ...
  rank @1 :UInt32;
}

# First message of a worker; the controller answers nothing until it arrives.
struct Register {
  worker @0 :WorkerId;
  pid @1 :UInt32;
  hostname @2 :Text;
  protocolVersion @3 :UInt32;
  # The worker's address as seen on the route to the controller (the interface it dials
  # from): where its peers reach it for Gloo and weight sync. 127.0.0.1 on one host.
  address @4 :Text;
}

# Both directions, every heartbeat interval: a worker proves it is alive to the
# controller, and the controller to its workers (so that they exit when it is gone).
struct Heartbeat {
  worker @0 :WorkerId;   # the sender; the controller sends role "controller"
  sequence @1 :UInt64;
}

struct Command {
  requestId @0 :UInt64;
  name @1 :Text;             # e.g. "ping", "describe"; roles add their own
  body @2 :Data;             # the command's struct, a Cap'n Proto message of its own
                             # (core/command_codec.h); empty for commands without arguments,
                             # raw bytes for ping
  attachments @3 :List(UInt64);  # byte sizes of the frames that follow
}

struct Reply {
  requestId @0 :UInt64;
  worker @1 :WorkerId;
  body @2 :Data;
  attachments @3 :List(UInt64);
}

# A command's partial result, sent before its Reply (rollout_generate: the samples that
# finished so far, so the controller scores them while the rest generate).
struct Progress {
  requestId @0 :UInt64;
  worker @1 :WorkerId;
  body @2 :Data;
  attachments @3 :List(UInt64);
}

struct ErrorReply {
  requestId @0 :UInt64;   # 0: not about one request
  worker @1 :WorkerId;
  message @2 :Text;
}

struct Shutdown {
  reason @0 :Text;
}

# Controller to worker: write every thread's stack into your log now (the controller
# thinks the worker hung and kills it next). The same `dumpId` may also come as the
# value of a SIGUSR2 (sigqueue), which works when the worker's I/O thread is the stuck
# one: the worker writes one dump per id, whichever trigger arrives first.
struct DumpStacks {
  dumpId @0 :UInt64;
  reason @1 :Text;    # why the controller asks, written at the top of the dump
}

# Worker to controller: dump `dumpId` is in the worker's log, so the controller need
# not wait any longer before it kills the worker.
struct StacksDumped {
  dumpId @0 :UInt64;
  worker @1 :WorkerId;
  summary @2 :Text;   # e.g. "9 threads, 7 stacks"
}

struct Message {
  union {
    register @0 :Register;
    heartbeat @1 :Heartbeat;
    command @2 :Command;
    reply @3 :Reply;
    error @4 :ErrorReply;
    shutdown @5 :Shutdown;
    progress @6 :Progress;
    dumpStacks @7 :DumpStacks;
    stacksDumped @8 :StacksDumped;
  }
}
