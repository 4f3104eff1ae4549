// Preference pairs for the reward model (controller/data/preference_pairs.h): each answer
// becomes prompt tokens + answer tokens + end of sequence, the prompt rendered as an RL run
// renders it; bad rows are named by file and line; the validation split.
#include "actor/tokenizer.h"
#include "controller/data/preference_pairs.h"
#include "core/error.h"
#include "core/files.h"
#include "core/process.h"

#include <doctest/doctest.h>

#include <algorithm>

#include <set>
#include <string>
#include <vector>

using namespace tandem;

namespace {

struct Fixture {
  TempDir dir;
  std::unique_ptr<Tokenizer> tokenizer;
  PreferenceEncoding encoding;
  Fixture() {
    write_byte_level_tokenizer(dir.path(), {"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
    tokenizer = load_tokenizer(dir.path());
    encoding.tokenizer = tokenizer.get();
    encoding.end_of_sequence = *tokenizer->token_to_id("<|im_end|>");
    // ChatML, the shape of Qwen's template.
    encoding.chat_template = ChatTemplate{
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
        "inline test template",
        {}};
  }
  std::string file(const std::string& name, const std::string& text) {
    write_file_atomic(dir.path() + "/" + name, text);
    return dir.path() + "/" + name;
  }
  std::vector<int32_t> ids(const std::string& text) const { return tokenizer->encode(text); }
};

std::vector<int32_t> join(std::vector<int32_t> a, const std::vector<int32_t>& b, int32_t end) {
  a.insert(a.end(), b.begin(), b.end());
  a.push_back(end);
  return a;
}

}  // namespace

TEST_CASE("preference pairs: string and chat prompts, string and one-message answers, as an RL sample's tokens") {
  Fixture f;
  const int32_t end = f.encoding.end_of_sequence;
  const std::string path =
      f.file("pairs.jsonl",
             "{\"prompt\": \"2+2=\", \"chosen\": \"4\", \"rejected\": \"5\"}\n"
             "\n"
             "{\"prompt\": [{\"role\": \"user\", \"content\": \"hi\"}], \"chosen\": [{\"role\": \"assistant\", "
             "\"content\": \"hello\"}], \"rejected\": \"go away\"}\n");
  const PreferenceSet set = load_preference_pairs(path, f.encoding);
  REQUIRE(set.pairs.size() == 2);
  CHECK(set.pairs[0].chosen == join(f.ids("2+2="), f.ids("4"), end));
  CHECK(set.pairs[0].rejected == join(f.ids("2+2="), f.ids("5"), end));
  CHECK(set.pairs[0].prompt_tokens == 4);
  CHECK(set.pairs[0].where == path + ":1");
  const std::vector<int32_t> chat = f.ids("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(set.pairs[1].chosen == join(chat, f.ids("hello"), end));
  CHECK(set.pairs[1].rejected == join(chat, f.ids("go away"), end));
  CHECK(set.pairs[1].where == path + ":3");

  // data.prompt_as_user_message renders string prompts through the template, as RL does.
  f.encoding.data.prompt_as_user_message = true;
  f.encoding.data.system_prompt = "be brief";
  const PreferenceSet rendered = load_preference_pairs(path, f.encoding);
  CHECK(rendered.pairs[0].chosen ==
        join(f.ids("<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\n2+2=<|im_end|>\n<|im_start|>assistant\n"),
             f.ids("4"), end));

  // Sequences over max_length are left out and counted; all of them is an error.
  f.encoding.data.prompt_as_user_message = false;
  f.encoding.max_length = 7;
  const PreferenceSet short_only = load_preference_pairs(path, f.encoding);
  CHECK(short_only.pairs.size() == 1);
  CHECK(short_only.skipped_long == 1);
  f.encoding.max_length = 3;
  CHECK_THROWS_WITH_AS(load_preference_pairs(path, f.encoding), doctest::Contains("every one of its 2 pairs is over"),
                       UsageError);
}

TEST_CASE("preference pairs: bad rows are named by file and line") {
  Fixture f;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"prompt\": \"a\", \"chosen\": \"b\"}", ":1: no \"rejected\" field"},
      {"[1, 2]", ":1: a row must be a JSON object, got array"},
      {"{\"prompt\": \"a\", \"chosen\": \"b\", \"rejected\": \"c\"}\n{oops", ":2: not valid JSON"},
      {"{\"prompt\": 3, \"chosen\": \"b\", \"rejected\": \"c\"}", ":1: \"prompt\" must be a string or a list"},
      {"{\"prompt\": \"a\", \"chosen\": [{\"role\": \"user\", \"content\": \"x\"}], \"rejected\": \"c\"}",
       ":1: \"chosen\" must be a string or a list of one assistant message"},
      {"", ": no preference pair in it"},
  };
  for (const auto& [text, expected] : cases) {
    INFO(text);
    const std::string path = f.file("bad.jsonl", text);
    CHECK_THROWS_WITH_AS(load_preference_pairs(path, f.encoding), doctest::Contains((path + expected).c_str()), UsageError);
  }
  // An empty answer is a policy that ended at once: its end-of-sequence token alone. With no
  // such token it would be the prompt alone, and is refused.
  const std::string empty = f.file("empty.jsonl", "{\"prompt\": \"a\", \"chosen\": \"b\", \"rejected\": \"\"}");
  const PreferenceSet with_end = load_preference_pairs(empty, f.encoding);
  REQUIRE(with_end.pairs.size() == 1);
  const PreferencePair& pair = with_end.pairs[0];
  REQUIRE(pair.rejected.size() == static_cast<size_t>(pair.prompt_tokens) + 1);
  CHECK(std::equal(pair.rejected.begin(), pair.rejected.end() - 1, pair.chosen.begin()));  // the prompt
  CHECK(pair.rejected.back() == f.encoding.end_of_sequence);
  f.encoding.end_of_sequence = -1;
  CHECK_THROWS_WITH_AS(load_preference_pairs(empty, f.encoding), doctest::Contains(":1: \"rejected\" is empty"),
                       UsageError);
  f.encoding.chat_template.reset();
  const std::string chat = f.file("chat.jsonl", "{\"prompt\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                                                "\"chosen\": \"a\", \"rejected\": \"b\"}");
  CHECK_THROWS_WITH_AS(load_preference_pairs(chat, f.encoding),
                       doctest::Contains((chat + ":1: the prompt is a list of chat messages but there is no chat template").c_str()),
                       UsageError);
  CHECK_THROWS_WITH_AS(load_preference_pairs(f.dir.path() + "/absent.jsonl", f.encoding),
                       doctest::Contains("absent.jsonl: cannot read the preference pairs"), UsageError);
}

TEST_CASE("the validation split holds out the fraction (at least one pair, never all), by the seed") {
  Fixture f;
  std::string text;
  for (int i = 0; i < 10; ++i) text += "{\"prompt\": \"p" + std::to_string(i) + "\", \"chosen\": \"a\", \"rejected\": \"b\"}\n";
  const std::string path = f.file("ten.jsonl", text);
  PreferenceSet train = load_preference_pairs(path, f.encoding);
  const PreferenceSet val = split_validation(train, 0.2, 7);
  CHECK(train.pairs.size() == 8);
  CHECK(val.pairs.size() == 2);
  std::set<std::string> where;
  for (const auto& p : train.pairs) where.insert(p.where);
  for (const auto& p : val.pairs) where.insert(p.where);
  CHECK(where.size() == 10);  // a partition: nothing lost, nothing twice
  PreferenceSet again = load_preference_pairs(path, f.encoding);
  CHECK(split_validation(again, 0.2, 7).pairs[0].where == val.pairs[0].where);  // the seed decides
  PreferenceSet tiny = load_preference_pairs(path, f.encoding);
  CHECK(split_validation(tiny, 0.001, 1).pairs.size() == 1);
  PreferenceSet most = load_preference_pairs(path, f.encoding);
  CHECK(split_validation(most, 1.0, 1).pairs.size() == 9);
}
