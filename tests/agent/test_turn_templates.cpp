// Token-exact multi-turn rendering (agent/chat_turn_template.h, issue 28 item 2), on the
// real chat templates of Qwen3 and Llama-3.2 (tool calls, tools in the `tools` variable).
//
// For random multi-turn conversations (tool calls with one or two results, environment
// replies as user messages, thinking blocks, text with whitespace, quotes, braces,
// non-ASCII), the conversation is built two ways:
//   incremental  what tandem feeds the model: the prompt rendered once (Jinja2), then each
//                model turn's text as written, then the frame for the new messages only;
//   whole        the finished conversation rendered in one go, as a framework that
//                re-renders would, by Jinja2 (what transformers uses) and by
//                transformers.js' Jinja (@huggingface/jinja), two implementations
//                tandem shares nothing with.
// They are equal except where the template rewrites what the model wrote. The test
// predicts each such place from the template's rules and requires the whole rendering to
// equal the incremental one with exactly those rewrites applied (and every conversation
// without a rewrite to be equal as is):
//   Qwen3:     a thinking block of an assistant turn before the last real user message is
//              dropped; an empty thinking block of a turn that is not the last is dropped;
//              the last turn without one gets an empty one.
//   Llama-3.x: an assistant message's content is trimmed.
// (@huggingface/jinja 0.5.11, the newest, ignores the argument of strip/lstrip/rstrip and
// strips all whitespace, so on Qwen3 its rewrites differ from Jinja2's; the prediction for
// it models that, and the count of conversations where the two disagree is printed.)
// tandem keeps the incremental tokens (what the model saw and was scored on); the
// rewrites are why a re-rendered conversation cannot be trusted for training.
// Also: the tokens render() gives decode to render_text()'s text, content spans hold the
// contents, and the model's own closing token is not repeated.
#include "actor/tokenizer.h"
#include "agent/chat_turn_template.h"
#include "core/error.h"
#include "tests/support/chat_template_reference.h"

#include <doctest/doctest.h>

#include <random>

using namespace tandem;
using namespace tandem::testing;

namespace {

struct TemplateModel {
  std::string name;
  bool qwen = false;
  std::string source;
  std::map<std::string, std::string> special_tokens;
  std::string turn_end;  // the model's end-of-turn token text
};

TemplateModel load_template(const std::string& name, const std::string& dir, bool qwen) {
  const std::optional<std::string> text = read_file(dir + "/tokenizer_config.json");
  REQUIRE_MESSAGE(text.has_value(), dir << "/tokenizer_config.json is unreadable");
  const json config = json::parse(*text);
  TemplateModel m;
  m.name = name;
  m.qwen = qwen;
  m.source = config.at("chat_template").get<std::string>();
  for (const char* key : {"bos_token", "eos_token"}) {
    if (config.contains(key) && config[key].is_string()) m.special_tokens[key] = config[key].get<std::string>();
  }
  m.turn_end = qwen ? "<|im_end|>" : "<|eot_id|>";
  return m;
}

const json& tools_schema() {
  static const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "calculator", "description": "Evaluates an arithmetic expression.",
     "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}},
    {"type": "function", "function": {"name": "python", "description": "Runs Python code and returns what it printed.",
     "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}}])");
  return tools;
}

python::JinjaInputs inputs(const TemplateModel& m, const json& messages, bool generation) {
  python::JinjaInputs in;
  in.messages = messages;
  in.add_generation_prompt = generation;
  in.special_tokens = m.special_tokens;
  in.extra = {{"tools", tools_schema()}, {"date_string", "28 Nov 2026"}};
  return in;
}

json message(const std::string& role, const std::string& content) { return {{"role", role}, {"content", content}}; }

// One model turn: what the model wrote, and what follows it.
struct Turn {
  std::string think;  // "" none; else the whole block "<think>\n...\n</think>\n\n"
  std::string body;   // after the thinking block
  bool ends_with_turn_end = false;  // the model wrote its end-of-turn token (else it stopped at a call)
  json following = json::array();   // tool results, or an environment's user message; empty for the last turn
};

struct Conversation {
  json prompt = json::array();
  std::vector<Turn> turns;
};

class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed) {}

  std::string text(size_t max_pieces = 10) {
    static const std::vector<std::string> pieces = {"a", "Z", "42", " ", "  ", "\n", "\t", "{", "}", "%", "#", "é",
                                                    "中", "🙂", "<", ">", "'", "\"", "\\", "|", ".", "x = 3", "thought"};
    std::string t;
    const size_t n = 1 + rng_() % max_pieces;
    for (size_t i = 0; i < n; ++i) t += pieces[rng_() % pieces.size()];
    return t;
  }
  // Words without leading or trailing newlines (a thinking block's inside as models write it).
  std::string words() {
    std::string t = "step " + std::to_string(rng_() % 1000);
    if (rng_() % 2) t += "\nthen " + text(4);
    while (!t.empty() && (t.back() == '\n')) t.pop_back();
    return t;
  }

  Conversation conversation(bool qwen) {
    Conversation c;
    if (rng_() % 2) c.prompt.push_back(message("system", "You are careful. " + text()));
    c.prompt.push_back(message("user", "Question: " + text()));
    const size_t turns = 1 + rng_() % 4;
    for (size_t t = 0; t < turns; ++t) {
      Turn turn;
      if (qwen) {
        const uint64_t k = rng_() % 4;  // none, empty, or a real thinking block
        turn.think = k == 0 ? "" : k == 1 ? "<think>\n\n</think>\n\n" : "<think>\n" + words() + "\n</think>\n\n";
      }
      const bool last = t + 1 == turns;
      const bool environment = !last && rng_() % 4 == 0;
      if (last || environment) {
        turn.body = text();
        turn.ends_with_turn_end = true;
        if (environment) turn.following.push_back(message("user", "Environment: " + text()));
      } else {
        const json call = {{"name", rng_() % 2 ? "calculator" : "python"}, {"arguments", {{"expression", text(4)}}}};
        if (qwen) {
          turn.body = (rng_() % 2 ? text(4) + "\n" : std::string()) + "<tool_call>\n" + call.dump() + "\n</tool_call>";
        } else {
          turn.body = json{{"name", call["name"]}, {"parameters", call["arguments"]}}.dump();
          turn.ends_with_turn_end = true;  // Llama ends a call with its end-of-turn token
        }
        const size_t results = qwen ? 1 + rng_() % 2 : 1;  // Llama-3.2 takes one call at a time
        for (size_t r = 0; r < results; ++r) {
          json result = message("tool", rng_() % 3 == 0 ? " " + text() + "\n" : text());
          result["name"] = call["name"];
          turn.following.push_back(result);
        }
      }
      c.turns.push_back(turn);
    }
    return c;
  }

 private:
  std::mt19937_64 rng_;
};

std::vector<TrajectoryMessage> trajectory_messages(const json& following) {
  std::vector<TrajectoryMessage> out;
  for (const json& m : following) {
    TrajectoryMessage t;
    t.role = m["role"].get<std::string>();
    t.content = m["content"].get<std::string>();
    out.push_back(t);
  }
  return out;
}

bool real_user_message(const json& m) {
  if (m["role"] != "user") return false;
  const std::string c = m["content"].get<std::string>();
  return !(c.rfind("<tool_response>", 0) == 0 && c.size() >= 16 && c.compare(c.size() - 16, 16, "</tool_response>") == 0);
}

// Strips `chars` (Jinja2: the argument; @huggingface/jinja 0.5.11 ignores the argument
// and strips all whitespace, which this test models as its own case).
struct Strip {
  bool any_whitespace = false;
  std::string chars(const char* given) const { return any_whitespace ? " \t\n\r\f\v" : given; }
  std::string left(const std::string& s, const char* given) const {
    const size_t a = s.find_first_not_of(chars(given));
    return a == std::string::npos ? "" : s.substr(a);
  }
  std::string right(const std::string& s, const char* given) const {
    const size_t b = s.find_last_not_of(chars(given));
    return b == std::string::npos ? "" : s.substr(0, b + 1);
  }
  std::string both(const std::string& s, const char* given) const { return left(right(s, given), given); }
};

// Qwen3's template's assistant branch, as a function of what the model wrote: it splits
// off a thinking block and writes it back only after the last real user message, and
// then only when it has words or the message is the last.
std::string qwen3_assistant(const std::string& text, bool after_last_query, bool last, const Strip& strip) {
  std::string content = text, reasoning;
  const size_t close = text.find("</think>");
  if (close != std::string::npos) {
    content = strip.left(text.substr(text.rfind("</think>") + 8), "\n");
    const std::string before = strip.right(text.substr(0, close), "\n");
    const size_t open = before.rfind("<think>");
    reasoning = strip.left(open == std::string::npos ? before : before.substr(open + 7), "\n");
  }
  if (after_last_query && (last || !reasoning.empty())) {
    return "<think>\n" + strip.both(reasoning, "\n") + "\n</think>\n\n" + strip.left(content, "\n");
  }
  return content;
}

}  // namespace

TEST_CASE("multi-turn rendering: the new messages alone, through Qwen3's and Llama-3.2's templates, equal the whole "
          "conversation but for the template's own rewrites") {
  if (!reference_ready()) return;
  const std::vector<TemplateModel> models = {load_template("Qwen3", assets_dir() + "/qwen3", true),
                                             load_template("Llama-3.2", assets_dir() + "/chat/llama3_2", false)};
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  Generator generate(seed);

  struct Case {
    const TemplateModel* model;
    Conversation conversation;
    std::string incremental;  // what tandem feeds the model
    std::string predicted;    // the incremental text with the template's rewrites applied (Jinja2)
    std::string predicted_js;  // ... as @huggingface/jinja applies them
    bool rewritten = false;
  };
  std::vector<Case> cases;
  std::vector<Request> requests;
  for (const TemplateModel& m : models) {
    ChatTurnTemplate turns(
        [&](const nlohmann::ordered_json& messages, bool generation) {
          return python::render_chat_template(m.source, inputs(m, messages, generation));
        },
        nullptr, {});
    for (int c = 0; c < 120; ++c) {
      Case k{&m, generate.conversation(m.qwen), "", "", "", false};
      const std::string prompt = python::render_chat_template(m.source, inputs(m, k.conversation.prompt, true));
      k.incremental = k.predicted = k.predicted_js = prompt;
      json whole = k.conversation.prompt;
      // Index of each assistant message in `whole`, to apply Qwen3's last-query rule.
      std::vector<size_t> assistant_at;
      for (const Turn& turn : k.conversation.turns) {
        assistant_at.push_back(whole.size());
        whole.push_back(message("assistant", turn.think + turn.body));
        for (const json& f : turn.following) whole.push_back(f);
      }
      size_t last_query = 0;
      for (size_t i = 0; i < whole.size(); ++i) {
        if (real_user_message(whole[i])) last_query = i;
      }
      for (size_t t = 0; t < k.conversation.turns.size(); ++t) {
        const Turn& turn = k.conversation.turns[t];
        const bool last = t + 1 == k.conversation.turns.size();
        std::string written = turn.think + turn.body;  // the model's text
        std::string rendered = written, rendered_js = written;  // what the whole rendering shows
        if (m.qwen) {
          const bool after_last_query = assistant_at[t] > last_query;
          rendered = qwen3_assistant(written, after_last_query, last, Strip{false});
          rendered_js = qwen3_assistant(written, after_last_query, last, Strip{true});
        } else {
          rendered = rendered_js = trim_like_jinja(written);
        }
        k.rewritten = k.rewritten || rendered != written;
        const std::string end = turn.ends_with_turn_end ? m.turn_end : "";
        k.incremental += written + end;
        k.predicted += rendered + end;
        k.predicted_js += rendered_js + end;
        if (!last) {
          const std::string frame = turns.render_text(end, trajectory_messages(turn.following));
          k.incremental += frame;
          k.predicted += frame;
          k.predicted_js += frame;
        }
      }
      Request r{m.source, inputs(m, whole, false)};
      requests.push_back(r);
      cases.push_back(std::move(k));
    }
  }
  const std::vector<json> expected = reference(requests);
  size_t equal_as_is = 0, rewritten = 0, js_differs = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& k = cases[i];
    INFO(k.model->name << " conversation " << i << ": " << requests[i].inputs.messages.dump());
    REQUIRE_MESSAGE(expected[i].contains("text"), expected[i].dump());
    // Jinja2 (what transformers renders with) and transformers.js' Jinja, each on the
    // whole conversation. The whole rendering closes the last assistant message; the
    // model's own end-of-turn token did that in the incremental text, and Qwen adds a
    // newline after it.
    const std::string whole = python::render_chat_template(requests[i].source, requests[i].inputs);
    const std::string whole_js = expected[i]["text"].get<std::string>();
    const std::string tail = k.model->qwen ? "\n" : "";
    CHECK(whole == k.predicted + tail);
    CHECK(whole_js == k.predicted_js + tail);
    js_differs += whole != whole_js ? 1 : 0;
    if (k.rewritten) {
      ++rewritten;
      CHECK(k.incremental != k.predicted);
    } else {
      ++equal_as_is;
      CHECK(whole == k.incremental + tail);
    }
  }
  MESSAGE(equal_as_is << " conversations equal as is, " << rewritten << " differ only by the template's rewrites; "
                      << js_differs << " where transformers.js' Jinja strips all whitespace for strip('\\n')");
  CHECK(equal_as_is >= 40);
  CHECK(rewritten >= 20);
}

TEST_CASE("multi-turn rendering: tokens decode to the frame's text, contents are spanned, the model's closing token "
          "is not repeated") {
  const std::string dir = assets_dir() + "/qwen3";
  if (!std::filesystem::exists(dir + "/tokenizer.json")) {
    const char* offline = std::getenv("TANDEM_OFFLINE");
    if (offline && std::string(offline) == "1") return;
    FAIL(dir << "/tokenizer.json is missing (scripts/fetch_tokenizer_assets.sh)");
  }
  const TemplateModel m = load_template("Qwen3", dir, true);
  std::shared_ptr<const Tokenizer> tokenizer = load_tokenizer(dir);
  const int32_t im_end = tokenizer->token_to_id("<|im_end|>").value();
  const int32_t call_end = tokenizer->token_to_id("</tool_call>").value();
  ChatTurnTemplate turns(
      [&](const nlohmann::ordered_json& messages, bool generation) {
        return python::render_chat_template(m.source, inputs(m, messages, generation));
      },
      tokenizer, {im_end});
  const TurnFrame two = turns.frame({"tool", "tool"});
  CHECK(two.texts == std::vector<std::string>{"<|im_end|>\n<|im_start|>user\n<tool_response>\n",
                                              "\n</tool_response>\n<tool_response>\n",
                                              "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"});
  std::vector<TrajectoryMessage> results(2);
  results[0].role = results[1].role = "tool";
  results[0].content = "42";
  results[1].content = "Traceback: ZeroDivisionError 中文 🙂";
  // After a call the model stopped at </tool_call>: the template's <|im_end|> is added.
  RenderedMessages r = turns.render(call_end, results, -1);
  CHECK(tokenizer->decode(r.tokens) == turns.render_text("", results));
  CHECK(r.tokens.front() == im_end);
  REQUIRE(r.content_spans.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    const auto [b, e] = r.content_spans[i];
    CHECK(tokenizer->decode(std::vector<int32_t>(r.tokens.begin() + b, r.tokens.begin() + e)) == results[i].content);
    for (int64_t k = 0; k < static_cast<int64_t>(r.tokens.size()); ++k) {
      if (k >= b && k < e) CHECK(r.kinds[k] == TokenKind::observation);
    }
  }
  CHECK(r.kinds.front() == TokenKind::template_);
  CHECK(!r.truncated);
  // After the model's own <|im_end|> (an environment's reply follows), it is not repeated.
  std::vector<TrajectoryMessage> reply(1);
  reply[0].role = "user";
  reply[0].content = "You guessed too low.";
  r = turns.render(im_end, reply, -1);
  CHECK(tokenizer->decode(r.tokens) == "\n<|im_start|>user\nYou guessed too low.<|im_end|>\n<|im_start|>assistant\n");
  // Contents are cut to the token budget.
  r = turns.render(call_end, results, 3);
  CHECK(r.truncated);
  CHECK(r.content_spans[1].second - r.content_spans[1].first == 3);
}

TEST_CASE("multi-turn rendering: a template whose tail depends on earlier messages is refused with the reason") {
  // Numbers tool results across the whole conversation: the tail alone cannot be rendered.
  const std::string source =
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% if m.role == 'tool' %}{% set ns.n = ns.n + 1 %}"
      "[result {{ ns.n + messages[0].content | length }}]{{ m.content }}{% else %}[{{ m.role }}]{{ m.content }}"
      "{% endif %}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}";
  ChatTurnTemplate turns(
      [&](const nlohmann::ordered_json& messages, bool generation) {
        python::JinjaInputs in;
        in.messages = messages;
        in.add_generation_prompt = generation;
        return python::render_chat_template(source, in);
      },
      nullptr, {});
  CHECK_THROWS_WITH_AS(turns.frame({"tool"}), doctest::Contains("changes with their contents or with earlier messages"),
                       Error);
}
