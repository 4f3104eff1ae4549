// Multi-turn rollouts with slow tools (issue 28): tandem's sessions (KV kept between
// turns, tools concurrent with decoding) against two baselines run on the same engine, the
// same model and the same trajectories:
//   resubmit  every turn re-prefills its whole prefix (engine max_pinned_blocks 0): what
//             every Python stack does when it ends the request at a tool call;
//   lockstep  no turn continues until every sample's turn ended and every tool returned
//             (TRL's batch-synchronous tool calls).
// The draws are counter-based, so all three produce the same tokens; only time and
// prefill differ. Tools sleep a pseudo-random 10-200 ms (a function of the call, so the
// same in every mode) and answer --tool-tokens tokens.
//
// Output: a JSON line per mode (wall seconds, prefill and decode tokens, the prefill the
// sessions saved), then one with the ratios. `multi_turn --help` for the options.
#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "agent/multi_turn.h"
#include "core/error.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

using namespace tandem;
using Json = nlohmann::ordered_json;

namespace {

constexpr const char* kUsage = R"(Usage: multi_turn [options]
  --prompts N         distinct prompts (default 8)
  --n N               samples per prompt (default 4)
  --prompt-tokens N   prompt length (default 256)
  --max-turns N       model turns per trajectory (default 4)
  --max-new-tokens N  per turn (default 64)
  --tool-tokens N     tokens in each tool answer (default 32)
  --min-ms, --max-ms  tool delay range (default 10, 200)
  --threads N         CPU threads (default 2)
  --hidden N, --layers N   model shape (default 256, 4; vocab 4096, Qwen3 layout)
)";

struct Args {
  int64_t prompts = 8, n = 4, prompt_tokens = 256, max_turns = 4, max_new_tokens = 48, tool_tokens = 32;
  int64_t min_ms = 10, max_ms = 200, threads = 2, hidden = 256, layers = 4;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (key == "--help") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (i + 1 >= argc) throw Error(fmt::format("{} needs a value", key));
    const int64_t value = std::stoll(argv[++i]);
    if (key == "--prompts") a.prompts = value;
    else if (key == "--n") a.n = value;
    else if (key == "--prompt-tokens") a.prompt_tokens = value;
    else if (key == "--max-turns") a.max_turns = value;
    else if (key == "--max-new-tokens") a.max_new_tokens = value;
    else if (key == "--tool-tokens") a.tool_tokens = value;
    else if (key == "--min-ms") a.min_ms = value;
    else if (key == "--max-ms") a.max_ms = value;
    else if (key == "--threads") a.threads = value;
    else if (key == "--hidden") a.hidden = value;
    else if (key == "--layers") a.layers = value;
    else throw Error(fmt::format("unknown option {}\n{}", key, kUsage));
  }
  return a;
}

uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr int32_t kVocab = 4096;
// About 1/16 of the ids, spread over the vocabulary, end a turn with a call.
bool ends_call(int32_t token) { return token > 4 && mix(static_cast<uint64_t>(token)) % 16 == 0; }

// Any turn that ends at a call token is a call to "sleep"; its arguments are the turn.
class BenchParser : public ToolCallParser {
 public:
  void reset() override { turn_.clear(); }
  ToolCallEvent feed(int32_t token) override {
    turn_.push_back(token);
    ToolCallEvent e;
    if (ends_call(token)) {
      e.kind = ToolCallEvent::Kind::call;
      e.call.name = "sleep";
      e.call.arguments = {{"turn", turn_}};
    }
    return e;
  }
  ToolCallEvent finish() override { return {}; }
  std::vector<int32_t> stop_tokens() const override {
    std::vector<int32_t> ends;
    for (int32_t t = 0; t < kVocab; ++t) {
      if (ends_call(t)) ends.push_back(t);
    }
    return ends;
  }

 private:
  std::vector<int32_t> turn_;
};

class SleepTool : public Tool {
 public:
  SleepTool(int64_t min_ms, int64_t max_ms, int64_t answer_bytes)
      : min_ms_(min_ms), max_ms_(max_ms), answer_bytes_(answer_bytes) {}
  std::string name() const override { return "sleep"; }
  nlohmann::ordered_json schema() const override { return {{"type", "function"}, {"function", {{"name", "sleep"}}}}; }
  ToolResult call(const nlohmann::json& arguments) override {
    const uint64_t h = mix(std::hash<std::string>()(arguments.dump()));
    std::this_thread::sleep_for(std::chrono::milliseconds(min_ms_ + static_cast<int64_t>(h % (max_ms_ - min_ms_ + 1))));
    std::string answer(static_cast<size_t>(answer_bytes_), 'x');
    for (size_t i = 0; i < answer.size(); ++i) answer[i] = static_cast<char>('a' + mix(h + i) % 26);
    return {answer, false, "", 0};
  }

 private:
  int64_t min_ms_, max_ms_, answer_bytes_;
};

// A byte per content token (ids 256..511), fixed template ids around each message.
class BenchRenderer : public TurnRenderer {
 public:
  RenderedMessages render(int32_t, const std::vector<TrajectoryMessage>& messages, int64_t max_content) const override {
    RenderedMessages r;
    auto add = [&](int32_t t, TokenKind k) {
      r.tokens.push_back(t);
      r.kinds.push_back(k);
    };
    add(1, TokenKind::template_);
    for (const TrajectoryMessage& m : messages) {
      add(2, TokenKind::template_);
      const int64_t begin = static_cast<int64_t>(r.tokens.size());
      for (unsigned char c : m.content) {
        if (max_content >= 0 && static_cast<int64_t>(r.tokens.size()) - begin >= max_content) break;
        add(256 + c, TokenKind::observation);
      }
      r.content_spans.push_back({begin, static_cast<int64_t>(r.tokens.size())});
      add(3, TokenKind::template_);
    }
    add(4, TokenKind::template_);
    return r;
  }
};

struct ModeResult {
  double seconds = 0;
  EngineStats engine;
  MultiTurnStats turns;
  int64_t tokens = 0;
};

ModeResult run_mode(const Args& a, const ModelConfig& config, const ModelWeights& weights, int64_t max_pinned,
                    bool lockstep, const std::vector<GenerationRequest>& requests) {
  EngineOptions options;
  options.threads = static_cast<int>(a.threads);
  options.kv_cache_bytes = int64_t{512} << 20;
  options.max_pinned_blocks = max_pinned;
  RolloutEngine engine(config, weights, options);
  BenchRenderer renderer;
  BenchParser parser;
  ToolRunner tools({std::make_shared<SleepTool>(a.min_ms, a.max_ms, a.tool_tokens)}, 64, std::chrono::seconds(30));
  MultiTurnOptions mt;
  mt.max_turns = a.max_turns;
  mt.max_new_tokens = a.max_new_tokens;
  mt.max_total_tokens = a.max_turns * (a.max_new_tokens + a.tool_tokens + 8);
  mt.max_tool_output_tokens = a.tool_tokens;
  mt.lockstep = lockstep;
  MultiTurnRollout rollout(engine, renderer, parser, tools, mt, {});
  const auto start = std::chrono::steady_clock::now();
  const std::vector<Trajectory> out = rollout.run(requests);
  ModeResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.engine = engine.stats();
  r.turns = rollout.stats();
  for (const Trajectory& t : out) r.tokens += static_cast<int64_t>(t.tokens.size());

  return r;
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  const Json shape = {{"model_type", "qwen3"},
                      {"hidden_size", a.hidden},
                      {"intermediate_size", a.hidden * 3},
                      {"num_hidden_layers", a.layers},
                      {"num_attention_heads", a.hidden / 64},
                      {"num_key_value_heads", std::max<int64_t>(1, a.hidden / 128)},
                      {"head_dim", 64},
                      {"vocab_size", kVocab},
                      {"max_position_embeddings", 8192},
                      {"rope_theta", 1000000},
                      {"rms_norm_eps", 1e-6},
                      {"tie_word_embeddings", false},  // tied random weights mostly repeat the input token
                      {"eos_token_id", 0}};
  const ModelConfig config = parse_model_config(shape.dump(), "the benchmark's model shape");
  const ModelWeights weights = random_model_weights(config, 7, 0.01);
  std::vector<GenerationRequest> requests;
  for (int64_t p = 0; p < a.prompts; ++p) {
    GenerationRequest r;
    r.id = static_cast<uint64_t>(p);
    for (int64_t t = 0; t < a.prompt_tokens; ++t) {
      r.prompt.push_back(5 + static_cast<int32_t>(mix(static_cast<uint64_t>(p << 20 | t)) % 3900));
    }
    r.n = a.n;
    r.sampling.temperature = 1.0;
    r.seed = mix(static_cast<uint64_t>(p) + 99);
    requests.push_back(r);
  }
  struct Mode {
    const char* name;
    int64_t max_pinned;
    bool lockstep;
  };
  const std::vector<Mode> modes = {{"sessions", -1, false}, {"resubmit", 0, false}, {"lockstep", -1, true}};
  std::map<std::string, ModeResult> results;
  for (const Mode& mode : modes) {
    std::cerr << "running " << mode.name << "...\n";
    const ModeResult r = run_mode(a, config, weights, mode.max_pinned, mode.lockstep, requests);
    results[mode.name] = r;
    Json line = {{"bench", "multi_turn"},
                 {"mode", mode.name},
                 {"seconds", r.seconds},
                 {"trajectories", r.turns.trajectories},
                 {"model_turns", r.turns.model_turns},
                 {"tool_calls", r.turns.tool_calls},
                 {"tool_seconds_sum", r.turns.tool_seconds},
                 {"trajectory_tokens", r.tokens},
                 {"prefill_tokens", r.engine.prefill_tokens},
                 {"decode_tokens", r.engine.decode_tokens},
                 {"session_tokens_reused", r.engine.session_tokens_reused},
                 {"forward_seconds", r.engine.forward_seconds},
                 {"kv_blocks_pinned_peak", r.engine.kv_blocks_pinned_peak}};
    for (const auto& [reason, count] : r.turns.stops) line["stop_" + std::string(stop_reason_name(reason))] = count;
    std::cout << line.dump() << std::endl;
  }
  const ModeResult& s = results["sessions"];
  TANDEM_CHECK(s.tokens == results["resubmit"].tokens && s.tokens == results["lockstep"].tokens,
               "the modes produced different trajectories");
  Json ratio = {{"bench", "multi_turn"},
                {"speedup_vs_resubmit", results["resubmit"].seconds / s.seconds},
                {"speedup_vs_lockstep", results["lockstep"].seconds / s.seconds},
                {"prefill_tokens_saved_vs_resubmit", results["resubmit"].engine.prefill_tokens - s.engine.prefill_tokens},
                {"prefill_ratio_resubmit_over_sessions",
                 static_cast<double>(results["resubmit"].engine.prefill_tokens) / static_cast<double>(s.engine.prefill_tokens)},
                {"goal", "speedup_vs_lockstep >= 2, speedup_vs_resubmit >= 1.3"}};
  std::cout << ratio.dump() << std::endl;
  return 0;
} catch (const std::exception& e) {
  std::cerr << "multi_turn: " << e.what() << "\n";
  return 1;
}
