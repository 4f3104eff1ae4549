// Loading plugin libraries (include/tandem/plugin.h) into this process.
//
// Every process that runs plugin code loads the libraries itself: the controller
// (rewards, advantage estimators) and each learner worker (policy losses). A library is
// loaded once per process, by canonical path; loading it again is a no-op.
#pragma once

#include "core/config.h"

#include <functional>
#include <string>

namespace tandem {

// dlopen()s the library, checks its API and libtorch versions, and runs its registration.
// Errors name the library and what went wrong: not found, not a tandem plugin, built for
// another API version or libtorch, a name already taken, an exception while registering.
void load_plugin(const std::string& path);

// Loads algorithm.plugin and every reward.N.plugin, then checks that the configured
// advantage estimator, policy loss and reward names are registered and each reward's
// settings. Messages read "<where(key)>: <key>: <what>"; `where` gives a key's origin
// (LoadedConfig::origin_of: file:line:col), or one fixed prefix.
void load_config_plugins(const Config& config, const std::function<std::string(const std::string& key)>& where);
void load_config_plugins(const Config& config, const std::string& where);

}  // namespace tandem
