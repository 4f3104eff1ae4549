// Trainer checkpoints: save on N ranks with any strategy, load on M with any (trainer.h).
// Optimizer moments are stored per rank with the global ranges they cover
// (checkpoint_ranges.h); loading copies, for each of the loading rank's ranges, the
// overlapping parts of every file.
#include "actor/model_weights.h"
#include "core/files.h"
#include "core/safetensors.h"
#include "learner/trainer_impl.h"

#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>

namespace tandem {

namespace fs = std::filesystem;

namespace {

// A reward model exports as Hugging Face's *ForSequenceClassification: the trunk's weights
// (model.*), `score.weight` [1, hidden] (the head's weight; its bias is 0 throughout, since
// the Bradley-Terry loss sees only score differences, and HF's score has none), no LM head.
ModelWeights reward_model_weights(const ModelWeights& policy, const std::vector<WeightTensor>& head) {
  std::vector<WeightTensor> tensors;
  for (const WeightTensor& t : policy.tensors()) {
    if (t.name != "lm_head.weight") tensors.push_back(t);
  }
  for (const WeightTensor& t : head) {
    if (t.name == "value_head.weight") tensors.push_back({"score.weight", t.shape, t.data});
  }
  return ModelWeights(std::move(tensors));
}

// config.json of a sequence classifier with one label: architectures renamed
// (Qwen3ForCausalLM → Qwen3ForSequenceClassification), num_labels 1 as HF saves it.
std::string reward_model_config_json(const std::string& causal_lm) {
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(causal_lm);
  nlohmann::ordered_json architectures = nlohmann::ordered_json::array();
  for (const auto& name : config.value("architectures", nlohmann::ordered_json::array())) {
    std::string a = name.get<std::string>();
    const std::string suffix = "ForCausalLM";
    if (a.size() > suffix.size() && a.compare(a.size() - suffix.size(), suffix.size(), suffix) == 0) {
      a = a.substr(0, a.size() - suffix.size()) + "ForSequenceClassification";
    }
    architectures.push_back(a);
  }
  config["architectures"] = architectures;
  config["id2label"] = {{"0", "LABEL_0"}};
  config["label2id"] = {{"LABEL_0", 0}};
  config["num_labels"] = 1;
  return config.dump(2) + "\n";
}


TensorToWrite float_tensor(const std::string& name, const at::Tensor& t) {
  at::Tensor c = t.detach().to(at::kCPU, at::kFloat).contiguous();
  TensorToWrite out{name, DType::f32, {c.numel()}, std::string(static_cast<size_t>(c.numel()) * 4, '\0')};
  std::memcpy(out.bytes.data(), c.data_ptr<float>(), out.bytes.size());
  return out;
}

}  // namespace

void fill_through_host(at::Tensor target, const std::function<void(float*)>& fill) {
  at::Tensor host = target.to(at::kCPU);
  fill(host.data_ptr<float>());
  if (!host.is_same(target)) target.copy_(host);
}

namespace {

// Copies into `target` (laid out by `target_ranges`) every element that `source` (laid out
// by `source_ranges`) holds.
void copy_overlaps(const float* source, const std::vector<OwnedRange>& source_ranges, float* target,
                   const std::vector<OwnedRange>& target_ranges) {
  for (const OwnedRange& s : source_ranges) {
    for (const OwnedRange& t : target_ranges) {
      const int64_t begin = std::max(s.global_offset, t.global_offset);
      const int64_t end = std::min(s.global_offset + s.numel, t.global_offset + t.numel);
      if (begin >= end) continue;
      std::memcpy(target + t.local_offset + (begin - t.global_offset), source + s.local_offset + (begin - s.global_offset),
                  static_cast<size_t>(end - begin) * sizeof(float));
    }
  }
}

const float* f32_data(const SafetensorsFile& file, const std::string& name, int64_t min_numel) {
  const TensorView& view = file.get(name);
  if (view.dtype != DType::f32 || view.shape.size() != 1 || view.shape[0] < min_numel) {
    throw Error(fmt::format("{}: {} must be a 1-D F32 tensor of at least {} values", file.path(), name, min_numel));
  }
  return reinterpret_cast<const float*>(view.data);
}

// The files that make a directory of weights a model others load: the tokenizer and its
// companions, copied from `tokenizer_dir` (tokenizer.json is required).
void copy_tokenizer_files(const std::string& tokenizer_dir, const std::string& out_dir, const char* what) {
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "generation_config.json"}) {
    std::optional<std::string> text = read_file(tokenizer_dir + "/" + name);
    if (text) {
      write_file_atomic(out_dir + "/" + name, *text);
    } else if (std::string(name) == "tokenizer.json") {
      throw Error(fmt::format("{}: {} has no tokenizer.json to copy", what, tokenizer_dir));
    }
  }
}

constexpr const char* kValueHeadFile = "value_head.safetensors";
constexpr const char* kAdapterDir = "adapter";  // LoRA's adapters, a PEFT adapter directory

// `adapters` (canonical, PEFT names without the prefix) as a PEFT adapter directory in `dir`.
void save_peft_adapter(const std::string& dir, const LoraSpec& spec, const std::string& base_model,
                       const std::vector<WeightTensor>& adapters) {
  fs::create_directories(dir);
  std::vector<TensorToWrite> tensors;
  for (const WeightTensor& w : adapters) {
    TensorToWrite t{kPeftKeyPrefix + w.name, DType::f32, w.shape, std::string(w.data.size() * sizeof(float), '\0')};
    std::memcpy(t.bytes.data(), w.data.data(), t.bytes.size());
    tensors.push_back(std::move(t));
  }
  write_safetensors(dir + "/adapter_model.safetensors", tensors, {{"format", "pt"}});
  write_file_atomic(dir + "/adapter_config.json", peft_adapter_config(spec, base_model));
}
constexpr const char* kReferenceDir = "reference";  // the warmed-up reference policy, when there was a warm-up

}  // namespace

std::unique_ptr<PolicyModel> Trainer::Impl::reference_from(const std::string& dir) const {
  return std::make_unique<PolicyModel>(model.config(), load_model_weights(dir, model.config()), at::kFloat,
                                       model.compute_dtype(), device, tensor_ops);
}

void Trainer::save_checkpoint(const std::string& dir, const std::string& tokenizer_dir) {
  Impl& m = *impl_;
  const int rank = m.collectives.rank(), world = m.collectives.world_size();
  const std::string staging = dir + ".tmp";
  if (rank == 0) {
    if (fs::exists(dir)) throw Error(fmt::format("checkpoint {} exists already", dir));
    fs::remove_all(staging);
    fs::create_directories(staging);
  }
  std::vector<WeightTensor> value_head, adapters;
  const ModelWeights weights = m.full_weights(&value_head, &adapters);  // collective under fsdp and tensor parallelism
  // Gathered by every tensor-parallel rank together; rank 0 writes it.
  const std::optional<ModelWeights> reference =
      m.reference_from_warmup ? std::optional<ModelWeights>(m.reference->to_weights()) : std::nullopt;
  m.collectives.barrier();
  // ddp replicas all hold the same: replica 0 writes it (one file, or one per tensor-parallel
  // rank, its shards' canonical ranges). Sharded ranks write their own.
  const bool sharded = m.strategy != Strategy::ddp;
  const int tensor_ranks = m.tensor_group ? m.tensor_group->world_size() : 1;
  const int files = sharded ? world : tensor_ranks;
  if ((sharded || m.data().rank() == 0) && m.options.learner.optimizer.name == "adamw") {
    write_safetensors(fmt::format("{}/optimizer-{}.safetensors", staging, rank),
                      {float_tensor("exp_avg", m.adam->exp_avg()), float_tensor("exp_avg_sq", m.adam->exp_avg_sq())},
                      {{"ranges", format_ranges(m.owned_ranges())}});
  }
  if (rank == 0) {
    save_model_weights(staging, weights, DType::f32);  // merged with the adapters: a model directory
    if (m.model.has_adapters()) {
      save_peft_adapter(staging + "/" + kAdapterDir, m.model.lora(), m.options.base_model, adapters);
    }
    if (m.reference_from_warmup) {
      fs::create_directories(staging + "/" + kReferenceDir);
      save_model_weights(staging + "/" + kReferenceDir, *reference, DType::f32);
    }
    if (m.critic()) {
      std::vector<TensorToWrite> tensors;
      for (const WeightTensor& w : value_head) {
        const int64_t numel = static_cast<int64_t>(w.data.size());  // flat, like the optimizer's files
        TensorToWrite t{w.name, DType::f32, {numel}, std::string(w.data.size() * sizeof(float), '\0')};
        std::memcpy(t.bytes.data(), w.data.data(), t.bytes.size());
        tensors.push_back(std::move(t));
      }
      write_safetensors(staging + "/" + kValueHeadFile, tensors, {});
    }
    write_file_atomic(staging + "/config.json", model_config_to_json(m.model.config()));
    if (!tokenizer_dir.empty()) copy_tokenizer_files(tokenizer_dir, staging, "checkpoint");  // a loadable model too
    nlohmann::json state = {{"optimizer_steps", m.steps},
                            {"adam_steps", m.adam->steps()},
                            {"world_size", world},
                            {"sharding", m.options.learner.sharding},
                            {"parameters", weights.parameter_count()},
                            {"optimizer", m.options.learner.optimizer.name},
                            {"optimizer_files", files}};
    write_file_atomic(staging + "/trainer_state.json", state.dump(2) + "\n");
  }
  m.collectives.barrier();  // every rank's files are written (and fsynced) before the rename
  if (rank == 0) fs::rename(staging, dir);
  m.collectives.barrier();
}

void Trainer::export_policy(const std::string& dir, const std::string& tokenizer_dir, DType dtype,
                            const std::string& config_extra) {
  Impl& m = *impl_;
  std::vector<WeightTensor> head, adapters;
  ModelWeights weights = m.full_weights(m.options.reward_model ? &head : nullptr, &adapters);  // collective under fsdp
  if (m.collectives.rank() == 0) {
    const std::string staging = dir + ".tmp", previous = dir + ".old";
    fs::remove_all(staging);
    fs::create_directories(staging);
    ModelConfig config = m.model.config();
    config.torch_dtype = dtype == DType::bf16 ? "bfloat16" : dtype == DType::f16 ? "float16" : "float32";
    std::string config_json = model_config_to_json(config);
    if (m.options.reward_model) {
      config_json = reward_model_config_json(config_json);
      weights = reward_model_weights(weights, head);
    }
    if (!config_extra.empty()) {
      nlohmann::ordered_json merged = nlohmann::ordered_json::parse(config_json);
      const nlohmann::ordered_json extra = nlohmann::ordered_json::parse(config_extra);
      for (const auto& [key, value] : extra.items()) merged[key] = value;
      config_json = merged.dump(2) + "\n";
    }
    write_file_atomic(staging + "/config.json", config_json);
    save_model_weights(staging, weights, dtype);  // merged with the adapters, if any
    if (m.model.has_adapters()) {  // and the adapters themselves, for PEFT on the base model
      save_peft_adapter(staging + "/" + kAdapterDir, m.model.lora(), m.options.base_model, adapters);
    }
    copy_tokenizer_files(tokenizer_dir, staging, "export");
    // An older export (a run extended by `tandem resume --set experiment.steps=N`) is
    // replaced: DIR holds the old policy or the new one at every moment but between the
    // two renames, and a crash there leaves DIR.old whole (removed by the next export).
    if (fs::exists(dir)) {
      fs::remove_all(previous);
      fs::rename(dir, previous);
    }
    fs::rename(staging, dir);
    fs::remove_all(previous);
  }
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
  const std::string reference_dir = dir + "/" + kReferenceDir;
  if (m.reference && fs::exists(reference_dir + "/model.safetensors")) {
    m.reference = m.reference_from(reference_dir);
    m.reference_from_warmup = true;
  }
  if (state.value("optimizer", std::string()) != m.options.learner.optimizer.name) {
    throw Error(fmt::format("checkpoint {} was written with optimizer {}, the config says {}", dir,
                            state.value("optimizer", std::string()), m.options.learner.optimizer.name));
  }
  // The global flat layout: the trained parameters in order, back to back (the model's, or
  // with LoRA its adapters': the base is the run's model), then the value head.
  std::vector<float> global;
  if (m.model.has_adapters()) {
    const std::string path = dir + "/" + kAdapterDir + "/adapter_model.safetensors";
    if (!fs::exists(path)) {
      throw Error(fmt::format("checkpoint {} has no LoRA adapters ({}): it was written without learner.lora", dir, path));
    }
    auto file = SafetensorsFile::open(path);
    for (size_t i = 0; i < m.model.adapter_shards().size(); ++i) {
      const ParameterShard& s = m.model.adapter_shards()[i];
      int64_t numel = 1;
      for (int64_t d : s.canonical_shape) numel *= d;
      const std::string key = kPeftKeyPrefix + s.name;
      const TensorView& view = file->get(key);
      if (view.dtype != DType::f32 || view.shape != s.canonical_shape) {
        throw Error(fmt::format("{}: {} must be F32 of shape {} (learner.lora.rank and target_modules as when it was "
                                "written)",
                                path, key, c10::str(at::IntArrayRef(s.canonical_shape))));
      }
      const float* data = reinterpret_cast<const float*>(view.data);
      global.insert(global.end(), data, data + numel);
    }
  } else {
    const ModelWeights weights = load_model_weights(dir, m.model.config());  // names and shapes checked
    for (const WeightSpec& spec : expected_weights(m.model.config())) {
      const std::vector<float>& data = weights.get(spec.name).data;
      global.insert(global.end(), data.begin(), data.end());
    }
  }
  if (m.critic()) {
    const std::string path = dir + "/" + kValueHeadFile;
    if (!fs::exists(path)) {
      throw Error(fmt::format("checkpoint {} has no critic ({}): it was not written by a run with advantage gae", dir,
                              kValueHeadFile));
    }
    auto file = SafetensorsFile::open(path);
    // Sizes from the model, not from the leaves: under fsdp a released leaf holds nothing.
    const int64_t hidden = m.model.config().hidden_size;
    for (const auto& [name, numel] : {std::pair<std::string, int64_t>{"value_head.weight", hidden},
                                      {"value_head.bias", int64_t{1}}}) {
      const float* data = f32_data(*file, name, numel);
      global.insert(global.end(), data, data + numel);
    }
  }
  const std::vector<OwnedRange> mine = m.owned_ranges();
  {
    c10::NoGradGuard no_grad;
    if (m.strategy == Strategy::fsdp) {
      fill_through_host(m.local_values(), [&](float* values) {
        copy_overlaps(global.data(), {{0, 0, static_cast<int64_t>(global.size())}}, values, mine);
      });
    } else if (m.tensor_ops) {  // ddp and zero2 keep every parameter of this rank's shards
      fill_through_host(m.flat->values(), [&](float* values) {
        copy_overlaps(global.data(), {{0, 0, static_cast<int64_t>(global.size())}}, values,
                      m.canonical_ranges({{0, 0, m.flat->numel()}}));
      });
    } else {  // ddp and zero2 keep the full parameters on every rank
      fill_through_host(m.flat->values(),
                        [&](float* values) { std::memcpy(values, global.data(), global.size() * sizeof(float)); });
    }
  }
  if (m.options.learner.optimizer.name == "adamw") {
    m.adam->exp_avg().zero_();
    m.adam->exp_avg_sq().zero_();
    const int files = state.value("optimizer_files", 0);
    for (int i = 0; i < files; ++i) {
      auto file = SafetensorsFile::open(fmt::format("{}/optimizer-{}.safetensors", dir, i));
      auto ranges_it = file->metadata().find("ranges");
      if (ranges_it == file->metadata().end()) throw Error(fmt::format("{}: no \"ranges\" metadata", file->path()));
      const std::vector<OwnedRange> ranges = parse_ranges(ranges_it->second, file->path());
      int64_t needed = 0;
      for (const OwnedRange& r : ranges) needed = std::max(needed, r.local_offset + r.numel);
      fill_through_host(m.adam->exp_avg(), [&](float* moments) {
        copy_overlaps(f32_data(*file, "exp_avg", needed), ranges, moments, mine);
      });
      fill_through_host(m.adam->exp_avg_sq(), [&](float* moments) {
        copy_overlaps(f32_data(*file, "exp_avg_sq", needed), ranges, moments, mine);
      });
    }
    m.adam->set_steps(state.value("adam_steps", int64_t{0}));
  }
  m.steps = state.value("optimizer_steps", int64_t{0});
}

}  // namespace tandem
