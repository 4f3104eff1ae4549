// Trainer checkpoints: save on N ranks, load on M (see trainer.h).
#include "actor/model_weights.h"
#include "core/files.h"
#include "core/safetensors.h"
#include "learner/trainer_impl.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>

namespace tandem {

namespace fs = std::filesystem;

namespace {

TensorToWrite float_tensor(const std::string& name, const at::Tensor& t) {
  at::Tensor c = t.detach().to(at::kFloat).contiguous();
  TensorToWrite out{name, DType::f32, {c.numel()}, std::string(static_cast<size_t>(c.numel()) * 4, '\0')};
  std::memcpy(out.bytes.data(), c.data_ptr<float>(), out.bytes.size());
  return out;
}

// The part of `file`'s tensor `name` (covering [file_offset, ...)) that overlaps
// [offset, offset + target.numel()), copied into target.
void copy_overlap(const SafetensorsFile& file, const std::string& name, int64_t file_offset, int64_t offset,
                  at::Tensor& target) {
  const TensorView& view = file.get(name);
  TANDEM_CHECK(view.dtype == DType::f32 && view.shape.size() == 1, "{}: {} is not a 1-D F32 tensor", file.path(), name);
  const int64_t begin = std::max(offset, file_offset);
  const int64_t end = std::min(offset + target.numel(), file_offset + view.shape[0]);
  if (begin >= end) return;
  std::memcpy(target.data_ptr<float>() + (begin - offset), view.data + (begin - file_offset) * 4,
              static_cast<size_t>(end - begin) * 4);
}

}  // namespace

void Trainer::save_checkpoint(const std::string& dir) {
  Impl& m = *impl_;
  const int rank = m.collectives.rank(), world = m.collectives.world_size();
  const std::string staging = dir + ".tmp";
  if (rank == 0) {
    if (fs::exists(dir)) throw Error(fmt::format("checkpoint {} exists already", dir));
    fs::remove_all(staging);
    fs::create_directories(staging);
  }
  m.collectives.barrier();
  // Optimizer moments: zero2 ranks own one shard each; ddp ranks all hold everything, rank 0 writes it.
  const bool writes_optimizer = m.zero2 || rank == 0;
  if (writes_optimizer && m.options.learner.optimizer.name == "adamw") {
    const int64_t offset = m.zero2 ? rank * m.flat.shard_numel() : 0;
    write_safetensors(fmt::format("{}/optimizer-{}.safetensors", staging, m.zero2 ? rank : 0),
                      {float_tensor("exp_avg", m.adam.exp_avg()), float_tensor("exp_avg_sq", m.adam.exp_avg_sq())},
                      {{"offset", std::to_string(offset)}, {"numel", std::to_string(m.adam.exp_avg().numel())}});
  }
  if (rank == 0) {
    save_model_weights(staging, m.model.to_weights(), DType::f32);
    write_file_atomic(staging + "/config.json", model_config_to_json(m.model.config()));
    nlohmann::json state = {{"optimizer_steps", m.steps},     {"adam_steps", m.adam.steps()},
                            {"world_size", world},           {"sharding", m.options.learner.sharding},
                            {"flat_numel", m.flat.numel()},  {"optimizer", m.options.learner.optimizer.name},
                            {"optimizer_files", m.zero2 ? world : 1}};
    write_file_atomic(staging + "/trainer_state.json", state.dump(2) + "\n");
  }
  m.collectives.barrier();  // every rank's files are written (and fsynced) before the rename
  if (rank == 0) fs::rename(staging, dir);
  m.collectives.barrier();
}

void Trainer::load_checkpoint(const std::string& dir) {
  Impl& m = *impl_;
  const std::string state_path = dir + "/trainer_state.json";
  std::optional<std::string> text = read_file(state_path);
  if (!text) throw Error(fmt::format("checkpoint {}: no trainer_state.json", dir));
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON: {}", state_path, e.what()));
  }
  if (state.value("flat_numel", int64_t{-1}) != m.flat.numel()) {
    throw Error(fmt::format("checkpoint {} holds {} parameters, this model has {}", dir,
                            state.value("flat_numel", int64_t{-1}), m.flat.numel()));
  }
  if (state.value("optimizer", std::string()) != m.options.learner.optimizer.name) {
    throw Error(fmt::format("checkpoint {} was written with optimizer {}, the config says {}", dir,
                            state.value("optimizer", std::string()), m.options.learner.optimizer.name));
  }
  // Parameters: the whole policy on every rank (flat values are full under ddp and zero2).
  const ModelWeights weights = load_model_weights(dir, m.model.config());
  {
    at::NoGradGuard no_grad;
    for (const FlatParameters::Entry& e : m.flat.entries()) {
      const WeightTensor& w = weights.get(e.name);
      std::memcpy(m.flat.values().data_ptr<float>() + e.offset, w.data.data(), static_cast<size_t>(e.numel) * 4);
    }
  }
  // Optimizer moments: this rank's range, gathered from whichever files overlap it.
  if (m.options.learner.optimizer.name == "adamw") {
    const int64_t offset = m.zero2 ? m.collectives.rank() * m.flat.shard_numel() : 0;
    m.adam.exp_avg().zero_();
    m.adam.exp_avg_sq().zero_();
    for (int i = 0; i < state.value("optimizer_files", 0); ++i) {
      auto file = SafetensorsFile::open(fmt::format("{}/optimizer-{}.safetensors", dir, i));
      const int64_t file_offset = std::stoll(file->metadata().at("offset"));
      copy_overlap(*file, "exp_avg", file_offset, offset, m.adam.exp_avg());
      copy_overlap(*file, "exp_avg_sq", file_offset, offset, m.adam.exp_avg_sq());
    }
    m.adam.set_steps(state.value("adam_steps", int64_t{0}));
  }
  m.steps = state.value("optimizer_steps", int64_t{0});
}

}  // namespace tandem
