// Tool calls read off token ids (agent/tool_call_parser.h): the Hermes format over a
// byte-level vocabulary with <tool_call> and </tool_call> as special tokens, and over
// Qwen3's real tokenizer where build/test-assets has it; every malformed call an error
// event that names what is wrong, never a silent end; random bodies never throw.
#include "agent/tool_call_parser.h"
#include "core/error.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

using namespace tandem;
namespace fs = std::filesystem;

namespace {

std::shared_ptr<const Tokenizer> byte_level_with_tool_tokens() {
  static std::shared_ptr<const Tokenizer> tokenizer = [] {
    const fs::path dir = fs::temp_directory_path() / ("tandem-tool-parser-" + std::to_string(getpid()));
    fs::create_directories(dir);
    write_byte_level_tokenizer(dir.string(), {"<|im_end|>", "<tool_call>", "</tool_call>"});
    std::shared_ptr<const Tokenizer> t = load_tokenizer(dir.string());
    fs::remove_all(dir);
    return t;
  }();
  return tokenizer;
}

// Feeds every token of `text`; returns the events that were not `none`, with the index
// of the token that produced each (text.size() for finish()).
std::vector<std::pair<size_t, ToolCallEvent>> run(ToolCallParser& parser, const Tokenizer& tokenizer,
                                                  const std::string& text) {
  std::vector<std::pair<size_t, ToolCallEvent>> events;
  const std::vector<int32_t> ids = tokenizer.encode(text);
  for (size_t i = 0; i < ids.size(); ++i) {
    ToolCallEvent e = parser.feed(ids[i]);
    if (e.kind != ToolCallEvent::Kind::none) events.emplace_back(i, std::move(e));
  }
  ToolCallEvent end = parser.finish();
  if (end.kind != ToolCallEvent::Kind::none) events.emplace_back(ids.size(), std::move(end));
  return events;
}

std::string error_of(const std::string& body) {
  auto tokenizer = byte_level_with_tool_tokens();
  auto parser = make_hermes_tool_parser(tokenizer);
  const auto events = run(*parser, *tokenizer, "<tool_call>" + body + "</tool_call>");
  REQUIRE(events.size() == 1);
  CHECK(events[0].second.kind == ToolCallEvent::Kind::error);
  CHECK(events[0].second.text == body);
  return events[0].second.error;
}

}  // namespace

TEST_CASE("a Hermes call completes at its closing token, with text before it left alone") {
  auto tokenizer = byte_level_with_tool_tokens();
  auto parser = make_hermes_tool_parser(tokenizer);
  const std::string text =
      "Let me add them.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"123+456\"}}\n"
      "</tool_call>";
  const std::vector<int32_t> ids = tokenizer->encode(text);
  REQUIRE(ids.back() == *tokenizer->token_to_id("</tool_call>"));
  CHECK(parser->stop_tokens() == std::vector<int32_t>{ids.back()});
  const auto events = run(*parser, *tokenizer, text);
  REQUIRE(events.size() == 1);
  CHECK(events[0].first == ids.size() - 1);  // at the closing token, not before
  const ToolCallEvent& e = events[0].second;
  CHECK(e.kind == ToolCallEvent::Kind::call);
  CHECK(e.index == 0);
  CHECK(e.call.name == "calculator");
  CHECK(e.call.arguments == nlohmann::json{{"expression", "123+456"}});

  // Calls are numbered across a turn; reset() starts a new turn at 0.
  parser->reset();
  const auto two = run(*parser, *tokenizer,
                       "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"b\"}</tool_call>");
  REQUIRE(two.size() == 2);
  CHECK(two[1].second.index == 1);
  CHECK(two[1].second.call.name == "b");
  CHECK(two[1].second.call.arguments == nlohmann::json::object());
  parser->reset();
  CHECK(run(*parser, *tokenizer, "<tool_call>{\"name\": \"c\"}</tool_call>")[0].second.index == 0);
}

TEST_CASE("arguments written as a JSON string are read as the object inside") {
  auto tokenizer = byte_level_with_tool_tokens();
  auto parser = make_hermes_tool_parser(tokenizer);
  const auto events = run(*parser, *tokenizer,
                          "<tool_call>{\"name\": \"search\", \"arguments\": \"{\\\"query\\\": \\\"tandem\\\"}\"}</tool_call>");
  REQUIRE(events.size() == 1);
  CHECK(events[0].second.kind == ToolCallEvent::Kind::call);
  CHECK(events[0].second.call.arguments == nlohmann::json{{"query", "tandem"}});
}

TEST_CASE("every malformed call is an error event that says what is wrong") {
  CHECK(error_of("{\"name\": \"calc\", \"arguments\": {\"x\": 1}") == "tool call 1: not valid JSON (at byte 38 of 38)");
  CHECK(error_of("  ") == "tool call 1: empty; write {\"name\": ..., \"arguments\": {...}}");
  CHECK(error_of("[1, 2]") == "tool call 1: expected a JSON object {\"name\": ..., \"arguments\": {...}}, got an array");
  CHECK(error_of("{\"arguments\": {}}") == "tool call 1: no \"name\"");
  CHECK(error_of("{\"name\": 7}") == "tool call 1: \"name\" must be a non-empty string, got a number");
  CHECK(error_of("{\"name\": \"\"}") == "tool call 1: \"name\" must be a non-empty string, got a string");
  CHECK(error_of("{\"name\": \"f\", \"arguments\": [1]}") == "tool call 1: \"arguments\" must be an object, got an array");
  CHECK(error_of("{\"name\": \"f\", \"arguments\": \"x=1\"}") ==
        "tool call 1: \"arguments\" is a string that is not a JSON object");

  auto tokenizer = byte_level_with_tool_tokens();
  auto parser = make_hermes_tool_parser(tokenizer);
  auto events = run(*parser, *tokenizer, "done </tool_call>");
  REQUIRE(events.size() == 1);
  CHECK(events[0].second.error == "tool call 1: </tool_call> without a <tool_call> before it");

  parser->reset();
  events = run(*parser, *tokenizer, "<tool_call>{\"name\": \"f\"");  // the turn hit its length
  REQUIRE(events.size() == 1);
  CHECK(events[0].second.error == "tool call 1: the turn ended before </tool_call>");
  CHECK(events[0].second.text == "{\"name\": \"f\"");

  parser->reset();
  events = run(*parser, *tokenizer, "<tool_call>{\"name\": <tool_call>{\"name\": \"g\"}</tool_call>");
  REQUIRE(events.size() == 2);
  CHECK(events[0].second.error == "tool call 1: a new <tool_call> began before this one was closed with </tool_call>");
  CHECK(events[1].second.kind == ToolCallEvent::Kind::call);
  CHECK(events[1].second.index == 1);
}

TEST_CASE("random call bodies never throw: each is a call or an error") {
  auto tokenizer = byte_level_with_tool_tokens();
  auto parser = make_hermes_tool_parser(tokenizer);
  std::mt19937 rng(std::random_device{}());
  const std::string alphabet = "{}[]\":,. \\ntrueflsnam0123456789argumentsx\xc3\xa9";
  const std::vector<std::string> pieces = {"{\"name\": \"f\", \"arguments\": ", "{", "}", "\"", "null", "[", "]", ":", ","};
  for (int trial = 0; trial < 500; ++trial) {
    std::string body;
    const int parts = std::uniform_int_distribution<int>(0, 12)(rng);
    for (int p = 0; p < parts; ++p) {
      if (rng() % 2) {
        body += pieces[rng() % pieces.size()];
      } else {
        body += alphabet[rng() % alphabet.size()];
      }
    }
    parser->reset();
    std::vector<std::pair<size_t, ToolCallEvent>> events;
    REQUIRE_NOTHROW(events = run(*parser, *tokenizer, "<tool_call>" + body + "</tool_call>"));
    REQUIRE(events.size() == 1);
    const ToolCallEvent& e = events[0].second;
    INFO(body);
    CHECK((e.kind == ToolCallEvent::Kind::call || e.kind == ToolCallEvent::Kind::error));
    if (e.kind == ToolCallEvent::Kind::error) CHECK(e.error.rfind("tool call 1: ", 0) == 0);
    if (e.kind == ToolCallEvent::Kind::call) CHECK(e.call.arguments.is_object());
  }
}

TEST_CASE("a vocabulary without the call tokens is refused by name; parsers are found by name") {
  const fs::path dir = fs::temp_directory_path() / ("tandem-tool-parser-plain-" + std::to_string(getpid()));
  fs::create_directories(dir);
  write_byte_level_tokenizer(dir.string(), {"<|im_end|>", "<tool_call>"});
  std::shared_ptr<const Tokenizer> plain = load_tokenizer(dir.string());
  fs::remove_all(dir);
  CHECK_THROWS_WITH_AS(make_hermes_tool_parser(plain),
                       "tool parser hermes: the tokenizer has no single token \"</tool_call>\" (the format needs "
                       "<tool_call> and </tool_call> as special tokens, as Qwen2.5 and Qwen3 have them)",
                       Error);

  CHECK(make_tool_parser("hermes", byte_level_with_tool_tokens()) != nullptr);
  CHECK_THROWS_WITH_AS(make_tool_parser("mistral", byte_level_with_tool_tokens()),
                       "unknown tool parser \"mistral\" (known: hermes)", Error);
  register_tool_parser("always_none", [](std::shared_ptr<const Tokenizer>) -> std::unique_ptr<ToolCallParser> {
    return make_hermes_tool_parser(byte_level_with_tool_tokens());
  });
  CHECK(tool_parser_names() == std::vector<std::string>{"always_none", "hermes"});
  CHECK_THROWS_WITH_AS(register_tool_parser("hermes", make_hermes_tool_parser),
                       "tool parser \"hermes\" is registered already", Error);
}

TEST_CASE("Qwen3's real tokenizer: the call tokens are single ids and a call parses") {
  const std::string dir = std::string(TANDEM_SOURCE_DIR) + "/build/test-assets/qwen3";
  if (!fs::exists(dir + "/tokenizer.json")) {
    MESSAGE("skipped: no " << dir << " (scripts/fetch_tokenizer_assets.sh fetches it)");
    return;
  }
  std::shared_ptr<const Tokenizer> qwen = load_tokenizer(dir);
  auto parser = make_hermes_tool_parser(qwen);
  CHECK(*qwen->token_to_id("<tool_call>") == 151657);  // Qwen3's vocabulary (tokenizer.json, added_tokens)
  CHECK(parser->stop_tokens() == std::vector<int32_t>{151658});
  const auto events = run(*parser, *qwen,
                          "<think>\nI should use the tool.\n</think>\n\n<tool_call>\n{\"name\": \"python\", \"arguments\": "
                          "{\"code\": \"print(sum(range(10)))\"}}\n</tool_call>");
  REQUIRE(events.size() == 1);
  CHECK(events[0].second.kind == ToolCallEvent::Kind::call);
  CHECK(events[0].second.call.name == "python");
  CHECK(events[0].second.call.arguments["code"] == "print(sum(range(10)))");
}
