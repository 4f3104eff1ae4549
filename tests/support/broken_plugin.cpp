// Test-only: plugin libraries that are wrong in one way each, chosen by BROKEN_KIND:
//   1 built for another plugin API version
//   2 its registration throws
//   3 registers a name a built-in already has
//   4 not a tandem plugin at all (no entry points)
#include <tandem/plugin.h>

#include <stdexcept>

#if BROKEN_KIND == 1
extern "C" int tandem_plugin_api_version() { return TANDEM_PLUGIN_API_VERSION + 998; }
extern "C" const char* tandem_plugin_torch_version() { return TORCH_VERSION; }
extern "C" void tandem_plugin_register(tandem::PluginRegistry&) {}
#elif BROKEN_KIND == 2
static void register_all(tandem::PluginRegistry&) { throw std::runtime_error("the plugin's own config is missing"); }
TANDEM_PLUGIN(register_all)
#elif BROKEN_KIND == 3
static void register_all(tandem::PluginRegistry& registry) {
  registry.add_advantage_estimator("grpo", [](const tandem::AdvantageInputs&, const tandem::AdvantageParams&) {
    return tandem::AdvantageResult{};
  });
}
TANDEM_PLUGIN(register_all)
#else
extern "C" int some_other_library_function() { return 4; }
#endif
