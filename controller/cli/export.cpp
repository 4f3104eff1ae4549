// `tandem export RUN_DIR|MODEL_DIR --format gguf|hf [--dtype f32|f16|bf16|q8_0] --out PATH`:
// a run's exported policy (RUN_DIR/policy), or any model directory (a checkpoint's
// checkpoints/step_<N>, a policy/), written as a GGUF file or a Hugging Face directory.
#include "controller/cli/cli.h"
#include "controller/run/model_export.h"
#include "core/error.h"

#include <cstdio>
#include <filesystem>

namespace tandem {

int cli_export(const ExportArgs& args) {
  namespace fs = std::filesystem;
  check_export_target(args.format, args.dtype, args.out);
  std::string model_dir;
  if (fs::exists(fs::path(args.dir) / "policy" / "config.json")) {
    model_dir = (fs::path(args.dir) / "policy").string();
  } else if (fs::exists(fs::path(args.dir) / "config.json")) {
    model_dir = args.dir;
  } else if (fs::exists(fs::path(args.dir) / "config.yaml")) {
    throw UsageError(fmt::format("tandem export: the run {} has no policy/ yet (it has not finished); export one of its "
                                 "checkpoints instead: tandem export {}/checkpoints/step_<N> ...",
                                 args.dir, args.dir));
  } else {
    throw UsageError(fmt::format("tandem export: {} is neither a run directory with a policy/ nor a model directory "
                                 "(no config.json)",
                                 args.dir));
  }
  std::string summary;
  try {
    summary = export_model_dir(model_dir, args.format, args.dtype, args.out);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(fmt::format("tandem export: {}", e.what()));  // the input directory is the user's
  }
  std::printf("wrote %s: %s from %s\n", args.out.c_str(), summary.c_str(), model_dir.c_str());
  return 0;
}

}  // namespace tandem
