// learner.snapshot: each rank's own state, copied to host memory after every step and read
// back by the rank's successor when a learner dies (trainer.h). Unlike a checkpoint it is
// never gathered or re-sharded: a rank writes exactly what it holds, with no collectives,
// so that a snapshot costs one copy of the rank's state and works on any host.
#include "actor/model_weights.h"
#include "learner/trainer_impl.h"

#include <c10/core/GradMode.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>

namespace tandem {

namespace fs = std::filesystem;

namespace {

std::string rank_file(const std::string& dir, int rank) { return fmt::format("{}/rank-{}.safetensors", dir, rank); }

// The metadata value `key` of a snapshot file, as an integer.
int64_t metadata_int(const SafetensorsFile& file, const std::string& key) {
  const auto it = file.metadata().find(key);
  if (it == file.metadata().end()) throw Error(fmt::format("{}: no \"{}\" metadata", file.path(), key));
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    throw Error(fmt::format("{}: \"{}\" is not an integer: {}", file.path(), key, it->second));
  }
}

// Tensor `name` of `file`: 1-D float32 of exactly `numel` values.
const float* exact_floats(const SafetensorsFile& file, const std::string& name, int64_t numel) {
  const TensorView& view = file.get(name);
  if (view.dtype != DType::f32 || view.shape.size() != 1 || view.shape[0] != numel) {
    throw Error(fmt::format("{}: {} must be a 1-D F32 tensor of {} values (this rank's)", file.path(), name, numel));
  }
  return reinterpret_cast<const float*>(view.data);
}

void copy_into(at::Tensor target, const float* source) {
  fill_through_host(target, [&](float* values) {
    std::memcpy(values, source, static_cast<size_t>(target.numel()) * sizeof(float));
  });
}

}  // namespace

at::Tensor Trainer::Impl::held_values() { return strategy == Strategy::fsdp ? local_values() : flat->values(); }

void Trainer::save_snapshot(const std::string& dir, const std::string& reference_dir) {
  Impl& m = *impl_;
  const int rank = m.collectives.rank();
  fs::create_directories(dir);
  std::vector<TensorToWrite> tensors = {float_tensor("values", m.held_values())};
  if (m.options.learner.optimizer.name == "adamw") {
    tensors.push_back(float_tensor("exp_avg", m.adam->exp_avg()));
    tensors.push_back(float_tensor("exp_avg_sq", m.adam->exp_avg_sq()));
  }
  write_safetensors(rank_file(dir, rank), tensors,
                    {{"rank", std::to_string(rank)},
                     {"world_size", std::to_string(m.collectives.world_size())},
                     {"sharding", m.options.learner.sharding},
                     {"optimizer", m.options.learner.optimizer.name},
                     {"optimizer_steps", std::to_string(m.steps)},
                     {"adam_steps", std::to_string(m.adam->steps())},
                     {"warmed_up_reference", m.reference_from_warmup ? "1" : "0"}});
  // The warmed-up reference never changes after the warm-up: written once, by whichever
  // rank of the host gets there first (a staging directory of its own, then a rename).
  if (m.reference_from_warmup && !fs::exists(reference_dir + "/model.safetensors")) {
    const std::string staging = fmt::format("{}.tmp-{}", reference_dir, ::getpid());
    fs::remove_all(staging);
    fs::create_directories(staging);
    save_model_weights(staging, m.reference->to_weights(), DType::f32);
    std::error_code lost_race;  // another rank renamed its copy first: the same weights
    fs::rename(staging, reference_dir, lost_race);
    fs::remove_all(staging, lost_race);
  }
}

void Trainer::load_snapshot(const std::string& dir, const std::string& reference_dir) {
  Impl& m = *impl_;
  const int rank = m.collectives.rank();
  const std::string path = rank_file(dir, rank);
  if (!fs::exists(path)) throw Error(fmt::format("no snapshot {} on this host", path));
  const std::unique_ptr<SafetensorsFile> file = SafetensorsFile::open(path);
  // Everything is checked before anything changes.
  const auto expect = [&](const std::string& key, const std::string& value) {
    const auto it = file->metadata().find(key);
    const std::string found = it == file->metadata().end() ? std::string("(none)") : it->second;
    if (found != value) throw Error(fmt::format("{}: {} is {}, this rank's is {}", path, key, found, value));
  };
  expect("rank", std::to_string(rank));
  expect("world_size", std::to_string(m.collectives.world_size()));
  expect("sharding", m.options.learner.sharding);
  expect("optimizer", m.options.learner.optimizer.name);
  const bool adamw = m.options.learner.optimizer.name == "adamw";
  at::Tensor values = m.held_values();
  const float* saved_values = exact_floats(*file, "values", values.numel());
  const float* saved_avg = adamw ? exact_floats(*file, "exp_avg", m.adam->exp_avg().numel()) : nullptr;
  const float* saved_avg_sq = adamw ? exact_floats(*file, "exp_avg_sq", m.adam->exp_avg_sq().numel()) : nullptr;
  const int64_t optimizer_steps = metadata_int(*file, "optimizer_steps");
  const int64_t adam_steps = metadata_int(*file, "adam_steps");
  std::unique_ptr<PolicyModel> reference;
  if (metadata_int(*file, "warmed_up_reference") != 0) {
    if (!fs::exists(reference_dir + "/model.safetensors")) {
      throw Error(fmt::format("{}: the warmed-up reference policy is not in {}", path, reference_dir));
    }
    reference = std::make_unique<PolicyModel>(m.model.config(), load_model_weights(reference_dir, m.model.config()),
                                              at::kFloat, m.model.compute_dtype(), m.device);
  }
  {
    c10::NoGradGuard no_grad;
    copy_into(values, saved_values);
  }
  if (adamw) {
    copy_into(m.adam->exp_avg(), saved_avg);
    copy_into(m.adam->exp_avg_sq(), saved_avg_sq);
  }
  m.adam->set_steps(adam_steps);
  m.steps = optimizer_steps;
  if (reference) {
    m.reference = std::move(reference);
    m.reference_from_warmup = true;
  }
}

}  // namespace tandem
