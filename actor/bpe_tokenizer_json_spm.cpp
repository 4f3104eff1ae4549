// The SentencePiece-style normalizer, pre-tokenizer and decoder of tokenizer.json.
#include "actor/bpe_tokenizer_json.h"

#include "actor/unicode_text.h"
#include "core/text.h"

#include <fmt/format.h>

namespace tandem {

using nlohmann::json;

namespace {

// Whether `text` is exactly one (well-formed) character.
bool one_char(const std::string& text) {
  size_t bad = 0;
  return !text.empty() && unicode::utf8_sequence_length(text, 0, &bad) == text.size();
}

void add_normalizer(const JsonReader& in, const json& step, const std::string& where, std::vector<SpmNormalizerStep>& steps) {
  std::string type = in.type_of(step, where);
  if (type == "Sequence") {
    const json& list = in.field(step, "normalizers", where + ".normalizers");
    if (!list.is_array()) in.fail(fmt::format("{}.normalizers is not a JSON array", where));
    for (size_t i = 0; i < list.size(); ++i) add_normalizer(in, list[i], fmt::format("{}.normalizers[{}]", where, i), steps);
  } else if (type == "NFC") {
    steps.push_back({SpmNormalizerStep::Kind::nfc, "", ""});
  } else if (type == "Prepend") {
    steps.push_back({SpmNormalizerStep::Kind::prepend, "", in.string_field(step, "prepend", where)});
  } else if (type == "Replace") {
    std::string pattern = in.string_pattern(step, where);
    steps.push_back({SpmNormalizerStep::Kind::replace, pattern, in.string_field(step, "content", where)});
  } else {
    in.unsupported(where + ".type", tandem::quoted(type));
  }
}

SpmMetaspace read_metaspace(const JsonReader& in, const json& step, const std::string& where) {
  SpmMetaspace metaspace;
  metaspace.replacement = in.string_field(step, "replacement", where);
  if (!one_char(metaspace.replacement)) {
    in.fail(fmt::format("{}.replacement is {}, not one character", where, tandem::quoted(metaspace.replacement)));
  }
  if (step.contains("prepend_scheme") && !step["prepend_scheme"].is_null()) {
    std::string scheme = in.string_field(step, "prepend_scheme", where);
    if (scheme == "always") metaspace.prepend = SpmMetaspace::Prepend::always;
    else if (scheme == "first") metaspace.prepend = SpmMetaspace::Prepend::first;
    else if (scheme == "never") metaspace.prepend = SpmMetaspace::Prepend::never;
    else in.fail(fmt::format("{}.prepend_scheme is {}, not \"always\", \"first\" or \"never\"", where, tandem::quoted(scheme)));
  } else {  // older files: add_prefix_space (HF's default is true)
    metaspace.prepend = in.flag(step, "add_prefix_space", true, where) ? SpmMetaspace::Prepend::always : SpmMetaspace::Prepend::never;
  }
  metaspace.split = in.flag(step, "split", true, where);
  return metaspace;
}

void add_decoder(const JsonReader& in, const json& step, const std::string& where, std::vector<SpmDecoderStep>& steps) {
  std::string type = in.type_of(step, where);
  SpmDecoderStep out;
  if (type == "Sequence") {
    const json& list = in.field(step, "decoders", where + ".decoders");
    if (!list.is_array()) in.fail(fmt::format("{}.decoders is not a JSON array", where));
    for (size_t i = 0; i < list.size(); ++i) add_decoder(in, list[i], fmt::format("{}.decoders[{}]", where, i), steps);
    return;
  } else if (type == "Replace") {
    out.kind = SpmDecoderStep::Kind::replace;
    out.pattern = in.string_pattern(step, where);
    out.content = in.string_field(step, "content", where);
  } else if (type == "ByteFallback") {
    out.kind = SpmDecoderStep::Kind::byte_fallback;
  } else if (type == "Fuse") {
    out.kind = SpmDecoderStep::Kind::fuse;
  } else if (type == "Strip") {
    out.kind = SpmDecoderStep::Kind::strip;
    std::string content = in.string_field(step, "content", where);
    if (!one_char(content)) in.fail(fmt::format("{}.content is {}, not one character", where, tandem::quoted(content)));
    out.strip_char = unicode::utf8_decode(content, 0, content.size());
    for (auto [key, value] : {std::pair{"start", &out.strip_start}, {"stop", &out.strip_stop}}) {
      const json& count = in.field(step, key, fmt::format("{}.{}", where, key));
      if (!count.is_number_integer() || count.get<int64_t>() < 0) in.fail(fmt::format("{}.{} is {}, not a count", where, key, count.dump()));
      *value = count.get<size_t>();
    }
  } else if (type == "Metaspace") {
    SpmMetaspace metaspace = read_metaspace(in, step, where);
    out.kind = SpmDecoderStep::Kind::metaspace;
    out.pattern = metaspace.replacement;
    out.metaspace_prepend = metaspace.prepend != SpmMetaspace::Prepend::never;
  } else {
    in.unsupported(where + ".type", tandem::quoted(type));
  }
  steps.push_back(std::move(out));
}

}  // namespace

std::vector<SpmNormalizerStep> read_spm_normalizer(const JsonReader& in, const json& normalizer) {
  std::vector<SpmNormalizerStep> steps;
  if (!normalizer.is_null()) add_normalizer(in, normalizer, "normalizer", steps);
  return steps;
}

bool read_spm_pre_tokenizer(const JsonReader& in, const json& pre_tokenizer, SpmMetaspace& metaspace) {
  if (pre_tokenizer.is_null()) return false;
  const json* step = &pre_tokenizer;
  std::string where = "pre_tokenizer";
  std::string type = in.type_of(*step, where);
  if (type == "Sequence") {  // a Sequence of one Metaspace is the same as the Metaspace
    const json& list = in.field(*step, "pretokenizers", where + ".pretokenizers");
    if (!list.is_array() || list.size() != 1) {
      in.unsupported(where + ".pretokenizers", "is not a list of one Metaspace step (SentencePiece-style BPE)");
    }
    step = &list[0];
    where += ".pretokenizers[0]";
    type = in.type_of(*step, where);
  }
  if (type != "Metaspace") in.unsupported(where + ".type", tandem::quoted(type) + " with a SentencePiece-style model");
  metaspace = read_metaspace(in, *step, where);
  return true;
}

std::vector<SpmDecoderStep> read_spm_decoder(const JsonReader& in, const json& decoder) {
  if (decoder.is_null()) in.unsupported("decoder", "is null (SentencePiece-style BPE decodes with ByteFallback or Metaspace)");
  std::vector<SpmDecoderStep> steps;
  add_decoder(in, decoder, "decoder", steps);
  return steps;
}

}  // namespace tandem
