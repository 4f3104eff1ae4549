// Tool calls in what the policy writes, found on token ids as they stream (issue 28,
// item 4): no re-tokenizing, and no silent end when a call is malformed.
//
// The built-in parser reads the Hermes format that Qwen2.5's and Qwen3's chat templates
// teach their models:
//   <tool_call>
//   {"name": "calculator", "arguments": {"expression": "2+2"}}
//   </tool_call>
// where <tool_call> and </tool_call> are single special tokens of the vocabulary. Each
// sampled token goes through feed(); the closing token completes a call, and is what the
// engine stops a turn at (stop_tokens) so that the tool can run. A call whose body is not
// a JSON object with a string "name" and an object "arguments" (or a string holding one,
// as some models write it) is an error event with a message meant for the model: the
// turn loop shows it as the tool's observation and counts it (multi_turn/parse_errors).
//
// Other formats plug in by name (register_tool_parser), as rewards and objectives do.
#pragma once

#include "actor/tokenizer.h"
#include "core/error.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

struct ToolCall {
  std::string name;
  nlohmann::json arguments = nlohmann::json::object();
};

// What one token (or the end of a turn) did.
struct ToolCallEvent {
  enum class Kind { none, call, error };
  Kind kind = Kind::none;
  size_t index = 0;   // which call of the turn, from 0 (call and error)
  ToolCall call;      // kind == call
  std::string error;  // kind == error: what was wrong, for the model to read
  std::string text;   // call and error: the call's body as the model wrote it
};

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  // A new turn: forgets any open call and restarts the call count.
  virtual void reset() = 0;
  // One sampled token.
  virtual ToolCallEvent feed(int32_t token) = 0;
  // The turn ended (end of sequence, a length cut): a call still open is an error.
  virtual ToolCallEvent finish() = 0;
  // The tokens at which the engine pauses a turn for its tool call.
  virtual std::vector<int32_t> stop_tokens() const = 0;
};

// The Hermes parser over `tokenizer`'s ids. Throws Error naming the missing token when
// the vocabulary has no single <tool_call> or </tool_call> token (checked before a run).
std::unique_ptr<ToolCallParser> make_hermes_tool_parser(std::shared_ptr<const Tokenizer> tokenizer);
// For a run without tools (an environment alone): no turn holds a call.
std::unique_ptr<ToolCallParser> make_no_tool_parser();

using ToolParserFactory = std::function<std::unique_ptr<ToolCallParser>(std::shared_ptr<const Tokenizer>)>;
// Adds a parser under `name` (a plugin's); a name taken already is an Error.
void register_tool_parser(const std::string& name, ToolParserFactory factory);
// The parser registered as `name` ("hermes" is built in); an unknown name is an Error
// listing the known ones.
std::unique_ptr<ToolCallParser> make_tool_parser(const std::string& name, std::shared_ptr<const Tokenizer> tokenizer);
std::vector<std::string> tool_parser_names();

// The checks a call's body gets, on its own (tests; other parsers of JSON bodies): the
// call, or an error message naming what is wrong. `index` numbers the call in messages.
ToolCallEvent parse_tool_call_json(const std::string& body, size_t index);

}  // namespace tandem
