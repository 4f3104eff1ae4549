// The byte-level tokenizer: exact round trips of arbitrary bytes, special tokens
// matched first (longest wins), clear errors.
#include "actor/byte_tokenizer.h"
#include "core/error.h"

#include <doctest/doctest.h>

#include <random>

using namespace tandem;

TEST_CASE("random bytes, including NUL and invalid UTF-8, round-trip exactly") {
  std::mt19937_64 rng(std::random_device{}());
  ByteTokenizer tokenizer;
  for (int round = 0; round < 500; ++round) {
    std::string text(rng() % 200, '\0');
    for (auto& c : text) c = static_cast<char>(rng() & 0xff);
    std::vector<int32_t> ids = tokenizer.encode(text);
    CHECK(ids.size() <= text.size());
    for (int32_t id : ids) CHECK((id >= 0 && id < tokenizer.vocab_size()));
    CHECK(tokenizer.decode(ids) == text);
  }
}

TEST_CASE("special tokens are single ids, matched before bytes, longest first") {
  ByteTokenizer tokenizer({"<a>", "<a><b>", "<|im_end|>"});
  CHECK(tokenizer.vocab_size() == 259);
  std::vector<int32_t> ids = tokenizer.encode("x<a><b>y<a>z<|im_end|>");
  std::vector<int32_t> expected = {'x', 257, 'y', 256, 'z', 258};
  CHECK(ids == expected);
  CHECK(tokenizer.decode(ids) == "x<a><b>y<a>z<|im_end|>");
  CHECK(tokenizer.encode("<a") == std::vector<int32_t>{'<', 'a'});
  CHECK(tokenizer.special_token_id("<|im_end|>") == 258);
  CHECK_THROWS_WITH_AS(tokenizer.special_token_id("<|im_ned|>"), doctest::Contains("did you mean <|im_end|>?"), Error);
}

TEST_CASE("ids outside the vocabulary are errors naming the position") {
  ByteTokenizer tokenizer;
  CHECK_THROWS_WITH_AS(tokenizer.decode({'a', 999}),
                       doctest::Contains("token 999 at position 1 is outside the vocabulary [0, 259)"), Error);
  CHECK_THROWS_WITH_AS(tokenizer.decode({-1}), doctest::Contains("token -1 at position 0"), Error);
  CHECK_THROWS_AS(ByteTokenizer({"<x>", "<x>"}), Error);
}
