# The replies of the commands every worker serves itself (core/worker_runtime.cpp),
# whatever its role. `ping` echoes its body and frames as raw bytes.
@0xbb403a8d5abb1532;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tandem::wire");

# A command without arguments, or a reply without results.
struct Empty {}

# describe's reply: who answered.
struct DescribeReply {
  role @0 :Text;
  rank @1 :UInt32;
  pid @2 :UInt32;
  host @3 :Text;
}

# trace_clock's reply: the worker's clock, for the controller's offset estimate.
struct TraceClock {
  nowUs @0 :Int64;
}

struct TraceThread {
  tid @0 :Int32;
  name @1 :Text;
}

struct TraceSpan {
  name @0 :Text;
  category @1 :Text;
  startUs @2 :Int64;
  durationUs @3 :Int64;
  tid @4 :Int32;
  count @5 :Int64;          # -1: nothing said
}

# trace_collect's reply: the spans recorded since the last collect (core/trace.h).
struct TraceCollected {
  pid @0 :UInt32;
  host @1 :Text;
  nowUs @2 :Int64;
  dropped @3 :UInt64;
  threads @4 :List(TraceThread);
  spans @5 :List(TraceSpan);
}
