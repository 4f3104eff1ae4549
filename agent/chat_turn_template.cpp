#include "agent/chat_turn_template.h"

#include "core/error.h"

#include <algorithm>

namespace tandem {

namespace {

// Plain ASCII words no template changes and no conversation contains.
const std::string kUserProbe = "TandemProbeUserQ7";
const std::string kAssistantProbe = "TandemProbeAssistantK4";
std::string message_probe(size_t i) { return "TandemProbeMessageZ" + std::to_string(i) + "X"; }

size_t count_of(const std::string& text, const std::string& word) {
  size_t n = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + word.size())) ++n;
  return n;
}

std::string joined(const std::vector<std::string>& roles) {
  std::string s;
  for (const std::string& r : roles) s += (s.empty() ? "" : ", ") + r;
  return "[" + s + "]";
}

}  // namespace

std::string trim_like_jinja(const std::string& text) {
  const char* space = " \t\n\r\f\v";
  const size_t a = text.find_first_not_of(space);
  if (a == std::string::npos) return "";
  return text.substr(a, text.find_last_not_of(space) - a + 1);
}

ChatTurnTemplate::ChatTurnTemplate(ChatRender render, std::shared_ptr<const Tokenizer> tokenizer,
                                   std::vector<int32_t> turn_end_tokens)
    : render_(std::move(render)), tokenizer_(std::move(tokenizer)), turn_end_tokens_(std::move(turn_end_tokens)) {}

std::string write_content(const std::string& content, ContentForm form) {
  switch (form) {
    case ContentForm::verbatim: return content;
    case ContentForm::trimmed: return trim_like_jinja(content);
    case ContentForm::json_string: return nlohmann::json(content).dump();
  }
  return content;
}

ChatTurnTemplate::ChatTurnTemplate(std::map<std::vector<std::string>, TurnFrame> frames,
                                   std::shared_ptr<const Tokenizer> tokenizer, std::vector<int32_t> turn_end_tokens)
    : tokenizer_(std::move(tokenizer)), turn_end_tokens_(std::move(turn_end_tokens)), frames_(std::move(frames)) {}

namespace {

const char* form_name(ContentForm form) {
  switch (form) {
    case ContentForm::verbatim: return "verbatim";
    case ContentForm::trimmed: return "trimmed";
    case ContentForm::json_string: return "json_string";
  }
  return "?";
}

std::vector<std::string> split_roles(const std::string& key) {
  std::vector<std::string> roles;
  size_t begin = 0;
  for (size_t comma = key.find(','); ; comma = key.find(',', begin)) {
    roles.push_back(key.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return roles;
}

}  // namespace

nlohmann::json turn_frames_to_json(const ChatTurnTemplate& turns, const std::vector<std::vector<std::string>>& signatures) {
  nlohmann::json out = nlohmann::json::object();
  for (const std::vector<std::string>& roles : signatures) {
    const TurnFrame f = turns.frame(roles);
    std::string key;
    for (const std::string& r : roles) key += (key.empty() ? "" : ",") + r;
    nlohmann::json forms = nlohmann::json::array();
    for (ContentForm form : f.forms) forms.push_back(form_name(form));
    out[key] = {{"texts", f.texts}, {"forms", forms}};
  }
  return out;
}

std::map<std::vector<std::string>, TurnFrame> turn_frames_from_json(const nlohmann::json& frames) {
  TANDEM_CHECK(frames.is_object(), "turn frames: expected a JSON object, got {}", frames.dump().substr(0, 100));
  std::map<std::vector<std::string>, TurnFrame> out;
  for (const auto& [key, value] : frames.items()) {
    const std::vector<std::string> roles = split_roles(key);
    TurnFrame f;
    if (!value.is_object() || !value.contains("texts") || !value["texts"].is_array() || !value.contains("forms") ||
        !value["forms"].is_array() || value["texts"].size() != roles.size() + 1 || value["forms"].size() != roles.size()) {
      throw Error(fmt::format("turn frames: the entry for [{}] is malformed: {}", key, value.dump().substr(0, 200)));
    }
    for (const nlohmann::json& t : value["texts"]) f.texts.push_back(t.get<std::string>());
    for (const nlohmann::json& form : value["forms"]) {
      const std::string name = form.is_string() ? form.get<std::string>() : "";
      if (name == "verbatim") f.forms.push_back(ContentForm::verbatim);
      else if (name == "trimmed") f.forms.push_back(ContentForm::trimmed);
      else if (name == "json_string") f.forms.push_back(ContentForm::json_string);
      else throw Error(fmt::format("turn frames: [{}] has an unknown content form {}", key, form.dump()));
    }
    out[roles] = std::move(f);
  }
  return out;
}

TurnFrame ChatTurnTemplate::frame(const std::vector<std::string>& roles) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = frames_.find(roles); it != frames_.end()) return it->second;
  }
  TANDEM_CHECK(!roles.empty(), "a turn frame needs at least one message");
  if (!render_) throw Error(fmt::format("no turn frame for messages {} after an assistant turn", joined(roles)));
  const std::string what = fmt::format("the chat template, for messages {} after an assistant turn", joined(roles));
  // The text after the assistant probe, cut at each message's content as the template
  // wrote it. `content(i)` is message i's; `user` and `assistant` vary the earlier
  // conversation. With `forms` empty, finds each content's form.
  auto cut = [&](const std::function<std::string(size_t)>& content, const std::string& user,
                 const std::string& assistant, std::vector<ContentForm>& forms) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", user}});
    messages.push_back({{"role", "assistant"}, {"content", assistant}});
    for (size_t i = 0; i < roles.size(); ++i) {
      nlohmann::ordered_json m = {{"role", roles[i]}, {"content", content(i)}};
      if (roles[i] == "tool") m["name"] = "tool";
      messages.push_back(std::move(m));
    }
    const std::string text = render_(messages, true);
    if (count_of(text, assistant) != 1) {
      throw Error(fmt::format("{}: the assistant message's content does not appear once in the rendering", what));
    }
    std::string after = text.substr(text.find(assistant) + assistant.size());
    std::vector<std::string> pieces;
    const bool find_forms = forms.empty();
    for (size_t i = 0; i < roles.size(); ++i) {
      if (find_forms) {
        ContentForm found = ContentForm::verbatim;
        bool any = false;
        for (ContentForm form : {ContentForm::verbatim, ContentForm::json_string, ContentForm::trimmed}) {
          if (count_of(after, write_content(content(i), form)) == 1) {
            found = form;
            any = true;
            break;
          }
        }
        if (!any) {
          throw Error(fmt::format("{}: message {}'s content is written neither as is, trimmed, nor as a JSON string",
                                  what, i + 1));
        }
        forms.push_back(found);
      }
      const std::string written = write_content(content(i), forms[i]);
      const size_t at = after.find(written);
      if (at == std::string::npos) throw Error(fmt::format("{}: message {}'s content is missing", what, i + 1));
      pieces.push_back(after.substr(0, at));
      after = after.substr(at + written.size());
    }
    pieces.push_back(after);
    return pieces;
  };
  TurnFrame f;
  // Whitespace around, a quote and a newline inside: tells the three forms apart.
  const std::vector<std::string> telling =
      cut([](size_t i) { return " \n" + message_probe(i) + " \"quoted\"\nline \n"; }, kUserProbe, kAssistantProbe,
          f.forms);
  f.texts = cut([](size_t i) { return message_probe(i); }, kUserProbe, kAssistantProbe, f.forms);
  // The frame must not depend on the contents or on the earlier conversation's words.
  std::vector<ContentForm> forms = f.forms;
  const std::vector<std::string> other = cut([](size_t i) { return message_probe(i) + " more"; },
                                             kUserProbe + " and a longer question?",
                                             kAssistantProbe + " Thinking it over.", forms);
  if (telling != f.texts || other != f.texts) {
    throw Error(fmt::format(
        "{}: the text between the messages changes with their contents or with earlier messages, so it cannot be "
        "rendered for the new messages alone; tandem supports templates whose tail depends only on the tail",
        what));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  return frames_.emplace(roles, f).first->second;
}

std::string ChatTurnTemplate::render_text(const std::string& last_model_token_text,
                                          const std::vector<TrajectoryMessage>& messages) const {
  std::vector<std::string> roles;
  for (const TrajectoryMessage& m : messages) roles.push_back(m.role);
  const TurnFrame f = frame(roles);
  std::string text = f.texts[0];
  if (!last_model_token_text.empty() && text.rfind(last_model_token_text, 0) == 0) {
    text = text.substr(last_model_token_text.size());
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    text += write_content(messages[i].content, f.forms[i]);
    text += f.texts[i + 1];
  }
  return text;
}

RenderedMessages ChatTurnTemplate::render(int32_t last_model_token, const std::vector<TrajectoryMessage>& messages,
                                          int64_t max_content_tokens) const {
  std::vector<std::string> roles;
  for (const TrajectoryMessage& m : messages) roles.push_back(m.role);
  const TurnFrame f = frame(roles);
  RenderedMessages r;
  auto add = [&](const std::vector<int32_t>& tokens, TokenKind kind) {
    r.tokens.insert(r.tokens.end(), tokens.begin(), tokens.end());
    r.kinds.insert(r.kinds.end(), tokens.size(), kind);
  };
  std::vector<int32_t> opening = tokenizer_->encode(f.texts[0]);
  // The model wrote the template's closing token itself: it is not added again.
  const bool model_closed = std::find(turn_end_tokens_.begin(), turn_end_tokens_.end(), last_model_token) !=
                            turn_end_tokens_.end();
  if (model_closed && !opening.empty() && opening.front() == last_model_token) opening.erase(opening.begin());
  add(opening, TokenKind::template_);
  for (size_t i = 0; i < messages.size(); ++i) {
    std::vector<int32_t> content = tokenizer_->encode(write_content(messages[i].content, f.forms[i]));
    if (max_content_tokens >= 0 && static_cast<int64_t>(content.size()) > max_content_tokens) {
      content.resize(static_cast<size_t>(max_content_tokens));
      r.truncated = true;
    }
    const int64_t begin = static_cast<int64_t>(r.tokens.size());
    add(content, TokenKind::observation);
    r.content_spans.push_back({begin, static_cast<int64_t>(r.tokens.size())});
    add(tokenizer_->encode(f.texts[i + 1]), TokenKind::template_);
  }
  return r;
}

}  // namespace tandem
