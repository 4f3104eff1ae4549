// Tool calls on token ids (tool_call_parser.h).
#include "agent/tool_call_parser.h"

#include "core/error.h"

#include <algorithm>
#include <map>
#include <mutex>

namespace tandem {

namespace {

constexpr const char* kOpen = "<tool_call>";
constexpr const char* kClose = "</tool_call>";
// A call longer than this many tokens is cut off as an error: a model that never closes
// its call would otherwise hold the whole turn's tokens here.
constexpr size_t kMaxCallTokens = 16384;

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

const char* json_kind(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::string: return "a string";
    case nlohmann::json::value_t::boolean: return "a boolean";
    case nlohmann::json::value_t::null: return "null";
    default: return "a number";
  }
}

ToolCallEvent error_event(size_t index, std::string text, std::string message) {
  ToolCallEvent e;
  e.kind = ToolCallEvent::Kind::error;
  e.index = index;
  e.text = std::move(text);
  e.error = fmt::format("tool call {}: {}", index + 1, message);
  return e;
}

class HermesParser : public ToolCallParser {
 public:
  HermesParser(std::shared_ptr<const Tokenizer> tokenizer, int32_t open, int32_t close)
      : tokenizer_(std::move(tokenizer)), open_(open), close_(close) {}

  void reset() override {
    inside_ = false;
    body_.clear();
    calls_ = 0;
  }

  ToolCallEvent feed(int32_t token) override {
    if (token == open_) {
      if (inside_) {
        // The open call is malformed; the new <tool_call> starts the next one.
        ToolCallEvent e = error_event(calls_++, decode_body(), "a new <tool_call> began before this one was closed with </tool_call>");
        body_.clear();
        return e;
      }
      inside_ = true;
      body_.clear();
      return {};
    }
    if (token == close_) {
      if (!inside_) return error_event(calls_++, "", "</tool_call> without a <tool_call> before it");
      inside_ = false;
      ToolCallEvent e = parse_tool_call_json(decode_body(), calls_++);
      body_.clear();
      return e;
    }
    if (inside_) {
      body_.push_back(token);
      if (body_.size() > kMaxCallTokens) {
        inside_ = false;
        ToolCallEvent e = error_event(calls_++, decode_body(),
                                      fmt::format("longer than {} tokens without </tool_call>", kMaxCallTokens));
        body_.clear();
        return e;
      }
    }
    return {};
  }

  ToolCallEvent finish() override {
    if (!inside_) return {};
    inside_ = false;
    ToolCallEvent e = error_event(calls_++, decode_body(), "the turn ended before </tool_call>");
    body_.clear();
    return e;
  }

  std::vector<int32_t> stop_tokens() const override { return {close_}; }

 private:
  std::string decode_body() const { return tokenizer_->decode(body_); }

  std::shared_ptr<const Tokenizer> tokenizer_;
  int32_t open_, close_;
  bool inside_ = false;
  std::vector<int32_t> body_;
  size_t calls_ = 0;
};

struct Registry {
  std::mutex mutex;
  std::map<std::string, ToolParserFactory> factories = {{"hermes", make_hermes_tool_parser}};
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

ToolCallEvent parse_tool_call_json(const std::string& written, size_t index) {
  const std::string body = trim(written);
  if (body.empty()) return error_event(index, written, "empty; write {\"name\": ..., \"arguments\": {...}}");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
    // Our own words and the byte offset, not the JSON library's message.
    return error_event(index, written,
                       fmt::format("not valid JSON (at byte {} of {})", std::min<size_t>(e.byte, body.size()), body.size()));
  }
  if (!j.is_object()) {
    return error_event(index, written,
                       fmt::format("expected a JSON object {{\"name\": ..., \"arguments\": {{...}}}}, got {}", json_kind(j)));
  }
  const auto name = j.find("name");
  if (name == j.end()) return error_event(index, written, "no \"name\"");
  if (!name->is_string() || name->get<std::string>().empty()) {
    return error_event(index, written, fmt::format("\"name\" must be a non-empty string, got {}", json_kind(*name)));
  }
  ToolCallEvent e;
  e.kind = ToolCallEvent::Kind::call;
  e.index = index;
  e.text = written;
  e.call.name = name->get<std::string>();
  const auto arguments = j.find("arguments");
  if (arguments == j.end() || arguments->is_null()) return e;  // a tool without parameters
  nlohmann::json value = *arguments;
  if (value.is_string()) {  // arguments written as a JSON-encoded string (the OpenAI wire form)
    value = nlohmann::json::parse(value.get<std::string>(), nullptr, false);
    if (value.is_discarded()) return error_event(index, written, "\"arguments\" is a string that is not a JSON object");
  }
  if (!value.is_object()) {
    return error_event(index, written, fmt::format("\"arguments\" must be an object, got {}", json_kind(value)));
  }
  e.call.arguments = std::move(value);
  return e;
}

std::unique_ptr<ToolCallParser> make_hermes_tool_parser(std::shared_ptr<const Tokenizer> tokenizer) {
  TANDEM_CHECK(tokenizer != nullptr, "tool parser hermes: no tokenizer");
  const std::optional<int32_t> open = tokenizer->token_to_id(kOpen);
  const std::optional<int32_t> close = tokenizer->token_to_id(kClose);
  for (const auto& [token, id] : {std::pair{kOpen, open}, std::pair{kClose, close}}) {
    if (!id) {
      throw Error(fmt::format("tool parser hermes: the tokenizer has no single token \"{}\" (the format needs "
                              "<tool_call> and </tool_call> as special tokens, as Qwen2.5 and Qwen3 have them)",
                              token));
    }
  }
  return std::make_unique<HermesParser>(std::move(tokenizer), *open, *close);
}

void register_tool_parser(const std::string& name, ToolParserFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.factories.emplace(name, std::move(factory)).second) {
    throw Error(fmt::format("tool parser \"{}\" is registered already", name));
  }
}

std::vector<std::string> tool_parser_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& entry : r.factories) names.push_back(entry.first);
  return names;
}

std::unique_ptr<ToolCallParser> make_tool_parser(const std::string& name, std::shared_ptr<const Tokenizer> tokenizer) {
  ToolParserFactory factory;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    const auto found = r.factories.find(name);
    if (found != r.factories.end()) factory = found->second;
  }
  if (!factory) {
    std::string known;
    for (const std::string& n : tool_parser_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error(fmt::format("unknown tool parser \"{}\" (known: {})", name, known));
  }
  return factory(std::move(tokenizer));
}

namespace {

class NoToolParser : public ToolCallParser {
 public:
  void reset() override {}
  ToolCallEvent feed(int32_t) override { return {}; }
  ToolCallEvent finish() override { return {}; }
  std::vector<int32_t> stop_tokens() const override { return {}; }
};

}  // namespace

std::unique_ptr<ToolCallParser> make_no_tool_parser() { return std::make_unique<NoToolParser>(); }

}  // namespace tandem
