// Chat-format prompts: tandem renders chat templates with Jinja2 (python/jinja_render.h)
// exactly as transformers.js' independent Jinja implementation does (@huggingface/jinja,
// tests/support/chat_template_reference.mjs), on Qwen3's and Llama-3's real templates, over fixed
// and fresh random conversations; and finds the template a model carries
// (controller/data/chat_prompts.h), rendering datasets or refusing them with the row.
#include "controller/data/chat_prompts.h"
#include "core/error.h"
#include "core/files.h"
#include "python/jinja_render.h"
#include "tests/support/chat_template_reference.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

using namespace tandem;
using namespace tandem::testing;
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

ChatTemplate model_template(const std::string& dir) {
  std::optional<ChatTemplate> found = find_chat_template("auto", dir);
  REQUIRE(found.has_value());
  return *found;
}

json message(const std::string& role, const std::string& content) { return {{"role", role}, {"content", content}}; }

// Fixed conversations: the shapes chat data has.
std::vector<json> fixed_conversations() {
  return {
      json::array({message("user", "What is 2+3?")}),
      json::array({message("system", "You are a careful math tutor."), message("user", "Natalia sold 48 clips.")}),
      json::array({message("user", "Hi"), message("assistant", "Hello! How can I help?"), message("user", "Add 4 and 5.")}),
      json::array({message("user", "  leading and trailing spaces  \n\n"), message("assistant", "ok"),
                   message("user", "Ünïcödé, 中文, emoji 🙂, tabs\tand {{ braces }} {% raw %}")}),
      json::array({message("user", "q"), message("assistant", "<think>\nlet me see\n</think>\n\nThe answer is 7."),
                   message("user", "and again?")}),
  };
}

// Fresh random conversations: an optional system message, then alternating user and
// assistant turns ending with the user, over text with the characters templates trip on.
std::vector<json> random_conversations(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<std::string> pieces = {"a", "Z", "42", " ", "  ", "\n", "\t", "{", "}", "%", "#", "é", "中", "🙂",
                                           "<", ">", "'", "\"", "\\", "think", "|", "."};
  auto text = [&] {
    std::string t;
    const size_t n = rng() % 12;
    for (size_t i = 0; i < n; ++i) t += pieces[rng() % pieces.size()];
    return t.empty() ? std::string("x") : t;
  };
  std::vector<json> out;
  for (size_t c = 0; c < count; ++c) {
    json messages = json::array();
    if (rng() % 2) messages.push_back(message("system", text()));
    const size_t turns = 1 + rng() % 3;
    for (size_t t = 0; t < turns; ++t) {
      messages.push_back(message("user", text()));
      if (t + 1 < turns) messages.push_back(message("assistant", text()));
    }
    out.push_back(messages);
  }
  return out;
}

}  // namespace

TEST_CASE("Qwen3's and Llama-3's chat templates render exactly as transformers.js' Jinja renders them") {
  if (!reference_ready()) return;
  const std::vector<std::string> models = {assets_dir() + "/qwen3", assets_dir() + "/chat/llama3"};
  std::random_device seeds;
  const uint64_t seed = seeds();
  INFO("random conversations seed ", seed);
  std::vector<Request> requests;
  for (const std::string& dir : models) {
    const ChatTemplate tmpl = model_template(dir);
    std::vector<json> conversations = fixed_conversations();
    for (json& c : random_conversations(40, seed)) conversations.push_back(std::move(c));
    for (const json& messages : conversations) {
      for (bool generation : {true, false}) {
        Request r{tmpl.source, {}};
        r.inputs.messages = messages;
        r.inputs.add_generation_prompt = generation;
        r.inputs.special_tokens = tmpl.special_tokens;
        requests.push_back(r);
      }
    }
    if (dir.find("qwen3") != std::string::npos) {  // Qwen3's switch for its thinking mode
      Request r{tmpl.source, {}};
      r.inputs.messages = fixed_conversations()[0];
      r.inputs.special_tokens = tmpl.special_tokens;
      r.inputs.extra = {{"enable_thinking", false}};
      requests.push_back(r);
    }
  }
  const std::vector<json> expected = reference(requests);
  size_t compared = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    INFO("request ", i, ": ", variables(requests[i].inputs).dump());
    REQUIRE_MESSAGE(expected[i].contains("text"), expected[i].dump());
    CHECK(python::render_chat_template(requests[i].source, requests[i].inputs) == expected[i]["text"].get<std::string>());
    ++compared;
  }
  CHECK(compared > 150);
  // What a rendering looks like, so that an empty template could not pass.
  python::JinjaInputs in;
  in.messages = fixed_conversations()[0];
  CHECK(python::render_chat_template(model_template(models[0]).source, in) ==
        "<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n");
}

TEST_CASE("template errors name Jinja's message; raise_exception reaches the user") {
  python::JinjaInputs in;
  in.messages = json::array({message("user", "x")});
  CHECK_THROWS_WITH_AS(python::render_chat_template("{% for m in messages %}{{ m.content }", in),
                       doctest::Contains("TemplateSyntaxError"), Error);
  CHECK_THROWS_WITH_AS(python::render_chat_template("{{ raise_exception('roles must alternate') }}", in),
                       doctest::Contains("roles must alternate"), Error);
  CHECK(python::render_chat_template("{{ messages[0] | tojson }}", in) == "{\"role\": \"user\", \"content\": \"x\"}");
}

TEST_CASE("a model's template is found beside it or in tokenizer_config.json; datasets render or are refused") {
  TempDir dir;
  const std::string model = dir.path() + "/model";
  fs::create_directories(model);
  CHECK_FALSE(find_chat_template("auto", model).has_value());  // no tokenizer_config.json: no template
  std::ofstream(model + "/tokenizer_config.json")
      << R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "chat_template": [
            {"name": "tool_use", "template": "TOOLS"},
            {"name": "default", "template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"}]})";
  ChatTemplate t = model_template(model);
  CHECK(t.special_tokens.at("bos_token") == "<s>");
  CHECK(t.special_tokens.at("eos_token") == "</s>");
  CHECK(t.origin == model + "/tokenizer_config.json");
  std::ofstream(model + "/chat_template.jinja") << "JINJA FILE";
  CHECK(model_template(model).source == "JINJA FILE");  // the file beside the model wins
  fs::remove(model + "/chat_template.jinja");
  CHECK_FALSE(find_chat_template("none", model).has_value());

  const std::string rows = dir.path() + "/rows.jsonl";
  std::ofstream(rows) << R"({"prompt": [{"role": "user", "content": "2+2?"}], "reward_model": {"ground_truth": "4"}})"
                      << "\n"
                      << R"({"prompt": "plain text", "reward_model": {"ground_truth": 5}})" << "\n";
  Dataset data = load_dataset(rows, DatasetKeys{"prompt", "reward_model.ground_truth"});
  CHECK(data.rows[0].at("answer") == "4");
  CHECK(data.rows[1].at("answer") == "5");
  DataConfig config;
  render_chat_prompts(data, config, t);
  CHECK(data.prompt(0) == "<s>[user]2+2?[assistant]");
  CHECK(data.prompt(1) == "plain text");  // strings stay as written unless prompt_as_user_message
  config.prompt_as_user_message = true;
  config.system_prompt = "Think.";
  Dataset again = load_dataset(rows, DatasetKeys{"prompt", "answer"});
  render_chat_prompts(again, config, t);
  CHECK(again.prompt(1) == "<s>[system]Think.[user]plain text[assistant]");

  Dataset no_template = load_dataset(rows, DatasetKeys{});
  CHECK_THROWS_WITH_AS(render_chat_prompts(no_template, DataConfig{}, std::nullopt),
                       doctest::Contains((rows + ":1: the prompt is a list of chat messages but there is no chat template").c_str()),
                       Error);
  std::ofstream(rows) << R"({"prompt": [{"role": "user", "content": "x"}]})" << "\n";
  ChatTemplate raising = t;
  raising.source = "{{ raise_exception('only system and user roles') }}";
  Dataset raises = load_dataset(rows, DatasetKeys{});
  CHECK_THROWS_WITH_AS(render_chat_prompts(raises, DataConfig{}, raising),
                       doctest::Contains((rows + ":1: rendering the prompt with the chat template").c_str()), Error);
}

TEST_CASE("datasets: JSON arrays, nested answers, bad prompts and Parquet are named") {
  TempDir dir;
  const std::string array = dir.path() + "/rows.json";
  std::ofstream(array) << R"([{"q": "a", "extra": {"gt": [1, 2]}}, {"q": "b", "extra": {}}])";
  Dataset data = load_dataset(array, DatasetKeys{"q", "extra.gt"});
  REQUIRE(data.rows.size() == 2);
  CHECK(data.rows[0].at("answer") == "[1,2]");
  CHECK(data.rows[1].count("answer") == 0);
  CHECK(data.where(1) == array + " row 2");
  std::ofstream(array) << R"({"q": "not an array"})";
  CHECK_THROWS_WITH_AS(load_dataset(array, DatasetKeys{"q"}), doctest::Contains("must be an array of objects"), Error);
  const std::string bad = dir.path() + "/bad.jsonl";
  std::ofstream(bad) << R"({"prompt": "ok"})" << "\n" << R"({"prompt": 42})" << "\n";
  CHECK_THROWS_WITH_AS(load_dataset(bad, DatasetKeys{}),
                       doctest::Contains((bad + ":2: the prompt (field \"prompt\") must be a string or a list of chat").c_str()),
                       Error);
  CHECK_THROWS_WITH_AS(load_dataset(dir.path() + "/train.parquet", DatasetKeys{}),
                       doctest::Contains("pandas.read_parquet"), Error);
}
