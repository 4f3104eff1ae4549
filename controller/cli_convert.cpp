// `tandem convert IN OUT --to hf [--dtype float32|bfloat16|float16]`: a llama2.c `.bin`
// checkpoint (actor/llama2c.h) as a Hugging Face model directory: config.json and
// model.safetensors. llama2.c files carry no tokenizer, so none is written: feed token
// ids, or add the tokenizer.json the model was trained with.
#include "actor/llama2c.h"
#include "actor/model_weights.h"
#include "controller/cli.h"
#include "core/error.h"
#include "core/files.h"
#include "core/safetensors.h"

#include <cstdio>
#include <filesystem>

namespace tandem {

int cli_convert(const ConvertArgs& args) {
  if (args.to != "hf") {
    throw UsageError(fmt::format("tandem convert: --to {} is not implemented yet (allowed today: hf)", args.to));
  }
  if (!is_llama2c_path(args.in)) {
    throw UsageError(fmt::format("tandem convert: {} is not a llama2.c checkpoint (a .bin file); the formats read "
                                 "today: llama2.c .bin",
                                 args.in));
  }
  namespace fs = std::filesystem;
  if (fs::exists(args.out) && !(fs::is_directory(args.out) && fs::is_empty(args.out))) {
    throw UsageError(fmt::format("tandem convert: {} exists and is not an empty directory", args.out));
  }
  Llama2cModel model;
  try {
    model = read_llama2c(args.in);
  } catch (const Error& e) {
    throw UsageError(e.what());  // the input is the user's: nothing was written
  }
  const DType dtype = args.dtype == "bfloat16" ? DType::bf16 : args.dtype == "float16" ? DType::f16 : DType::f32;
  model.config.torch_dtype = args.dtype;
  const std::string staging = args.out + ".tmp";
  fs::remove_all(staging);
  fs::create_directories(staging);
  write_file_atomic(staging + "/config.json", model_config_to_json(model.config));
  save_model_weights(staging, model.weights, dtype);
  fs::remove(args.out);  // an empty directory, if any
  fs::rename(staging, args.out);
  std::printf("wrote %s: llama (%lld parameters, %s) from %s; no tokenizer (llama2.c files have none)\n",
              args.out.c_str(), static_cast<long long>(model.weights.parameter_count()), args.dtype.c_str(),
              args.in.c_str());
  return 0;
}

}  // namespace tandem
