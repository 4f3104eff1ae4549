// `tandem init-model --preset tiny|small --out DIR`: a random-weight HF model directory.
#include "actor/model_weights.h"
#include "actor/presets.h"
#include "controller/cli.h"
#include "core/safetensors.h"

#include <cstdio>

namespace tandem {

int cli_init_model(const InitModelArgs& args) {
  const DType dtype = args.dtype == "bfloat16" ? DType::bf16 : args.dtype == "float16" ? DType::f16 : DType::f32;
  write_model_preset(args.preset, args.out_dir, static_cast<uint64_t>(args.seed), dtype);
  const ModelConfig config = model_preset_config(args.preset);
  const int64_t parameters = parameter_count(config);
  std::printf("wrote %s: %s preset (%s, %lld parameters, %s, seed %lld): config.json, model.safetensors, "
              "tokenizer.json, tokenizer_config.json\n",
              args.out_dir.c_str(), args.preset.c_str(), config.model_type.c_str(), static_cast<long long>(parameters),
              args.dtype.c_str(), static_cast<long long>(args.seed));
  return 0;
}

}  // namespace tandem
