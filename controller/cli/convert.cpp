// `tandem convert IN OUT --to hf|gguf [--dtype f32|f16|bf16|q8_0]`: a model from one format
// to another. IN: a llama2.c `.bin` checkpoint (actor/llama2c.h), a `.gguf` file
// (actor/gguf_model.h), a Hugging Face directory or builtin:<preset>. Files are read into a
// scratch Hugging Face directory first, then written as asked (controller/run/model_export.h).
// llama2.c files carry no tokenizer, so none is written: feed token ids, or add the
// tokenizer.json the model was trained with.
#include "actor/gguf_model.h"
#include "actor/llama2c.h"
#include "actor/model_weights.h"
#include "actor/presets.h"
#include "controller/cli/cli.h"
#include "controller/run/model_export.h"
#include "core/error.h"
#include "core/files.h"
#include "core/safetensors.h"

#include <cstdio>
#include <filesystem>

namespace tandem {

int cli_convert(const ConvertArgs& args) {
  namespace fs = std::filesystem;
  if (args.to != "hf" && args.to != "gguf") {
    throw UsageError(fmt::format("tandem convert: --to {}: allowed: hf, gguf", args.to));
  }
  check_export_target(args.to, args.dtype, args.out);
  const bool from_llama2c = is_llama2c_path(args.in), from_gguf = is_gguf_path(args.in);
  if (!from_llama2c && !from_gguf && args.in.rfind("builtin:", 0) != 0 && !fs::exists(fs::path(args.in) / "config.json")) {
    throw UsageError(fmt::format("tandem convert: {} is neither a llama2.c checkpoint (.bin), a GGUF file (.gguf) nor a "
                                 "Hugging Face model directory",
                                 args.in));
  }
  TempDir scratch;
  std::string model_dir = scratch.path();
  try {  // the input is the user's: a bad file is exit 2, and nothing was written
    if (from_llama2c) {
      const Llama2cModel model = read_llama2c(args.in);
      write_file_atomic(model_dir + "/config.json", model_config_to_json(model.config));
      save_model_weights(model_dir, model.weights, DType::f32);
    } else if (from_gguf) {
      convert_gguf_to_hf(args.in, model_dir, DType::f32);
    } else {
      model_dir = resolve_model_path(args.in);
    }
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  const std::string summary = export_model_dir(model_dir, args.to, args.dtype, args.out);
  const bool tokenizer = fs::exists(fs::path(model_dir) / "tokenizer.json");
  std::printf("wrote %s: %s from %s%s\n", args.out.c_str(), summary.c_str(), args.in.c_str(),
              tokenizer ? "" : from_llama2c ? "; no tokenizer (llama2.c files have none)" : "; no tokenizer");
  return 0;
}

}  // namespace tandem
