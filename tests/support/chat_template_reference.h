// The independent chat-template reference for tests: transformers.js' Jinja implementation
// (@huggingface/jinja, fetched into build/test-assets/chat/node by scripts/fetch_chat_assets.sh)
// run by node over tests/support/chat_template_reference.mjs, and the template assets'
// whereabouts.
#pragma once

#include "core/files.h"
#include "python/jinja_render.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tandem::testing {

using json = nlohmann::ordered_json;

inline std::string assets_dir() { return std::string(TANDEM_SOURCE_DIR) + "/build/test-assets"; }
inline std::string node_modules() { return assets_dir() + "/chat/node/node_modules"; }

// True when the reference can run; otherwise fails saying how to fetch it, or with
// TANDEM_OFFLINE=1 reports the skip. Never passes silently.
inline bool reference_ready() {
  std::string missing;
  if (!std::filesystem::exists(assets_dir() + "/qwen3/tokenizer_config.json")) {
    missing = assets_dir() + "/qwen3/tokenizer_config.json is missing (scripts/fetch_tokenizer_assets.sh)";
  } else if (!std::filesystem::exists(assets_dir() + "/chat/llama3/tokenizer_config.json") ||
             !std::filesystem::exists(assets_dir() + "/chat/llama3_2/tokenizer_config.json") ||
             !std::filesystem::exists(node_modules() + "/@huggingface/jinja/package.json")) {
    missing = assets_dir() + "/chat is incomplete (scripts/fetch_chat_assets.sh)";
  } else if (std::system("node --version > /dev/null 2>&1") != 0) {
    missing = "node is not on PATH (scripts/install_deps.sh installs it)";
  }
  if (missing.empty()) return true;
  const std::string message = missing + "; the fetch needs npm and the network; TANDEM_OFFLINE=1 skips this comparison";
  const char* offline = std::getenv("TANDEM_OFFLINE");
  if (offline && std::string(offline) == "1") {
    std::fprintf(stderr, "skipped (TANDEM_OFFLINE=1): %s\n", message.c_str());
    return false;
  }
  FAIL(message);
  return false;
}

struct Request {
  std::string source;
  python::JinjaInputs inputs;
};

inline json variables(const python::JinjaInputs& in) {
  json v = in.extra;
  v["messages"] = in.messages;
  v["add_generation_prompt"] = in.add_generation_prompt;
  for (const auto& [name, token] : in.special_tokens) v[name] = token;
  return v;
}

// The reference's renderings, one per request.
inline std::vector<json> reference(const std::vector<Request>& requests) {
  TempDir dir;
  const std::string in = dir.path() + "/requests.jsonl", out = dir.path() + "/answers.jsonl";
  {
    std::ofstream file(in);
    for (const Request& r : requests) file << json{{"template", r.source}, {"variables", variables(r.inputs)}}.dump() << "\n";
  }
  const std::string command = fmt::format("node '{}/tests/support/chat_template_reference.mjs' '{}' < '{}' > '{}'",
                                          TANDEM_SOURCE_DIR, node_modules(), in, out);
  REQUIRE_MESSAGE(std::system(command.c_str()) == 0, command);
  std::vector<json> answers;
  std::ifstream file(out);
  for (std::string line; std::getline(file, line);) answers.push_back(json::parse(line));
  REQUIRE(answers.size() == requests.size());
  return answers;
}

}  // namespace tandem::testing
