# A worker's part of one weight sync, as the controller sends it inside learner_publish
# and rollout_load_weights (weight_sync/transport.h's WeightSyncOptions, field by field).
@0xdde276e633cf0457;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tandem::wire");

struct WeightSyncTransport {
  method @0 :Text;          # shm | collective | cuda_ipc | nccl
  address @1 :Text;         # the shm name, the rendezvous directory, or a label
  rank @2 :Int32;           # 0 sends, 1 .. worldSize-1 receive
  worldSize @3 :Int32;
  bucketBytes @4 :Int64;
  timeoutS @5 :Float64;
  host @6 :Text;            # collective: the address this rank listens on
  ncclUniqueId @7 :Data;    # nccl: the raw unique id (empty for other methods)
  cudaDevice @8 :Int32;
  # Tensor-parallel sizes of the learner (sources) and of each rollout engine (destinations)
  # when the weights move between their layouts (weight_sync/reshard.h), shm only: one
  # segment per (source, destination) pair. 0: one stream of whole tensors.
  reshardSources @9 :Int32;
  reshardDestinations @10 :Int32;
}
