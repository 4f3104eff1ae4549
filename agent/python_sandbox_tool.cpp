// The `builtin: python` tool (python_sandbox_tool.h).
#include "agent/python_sandbox_tool.h"

#include <fmt/format.h>

namespace tandem {

namespace {

// The last `bytes` of `text`, from a line start where there is one (a traceback's end says
// what went wrong).
std::string tail_of(const std::string& text, size_t bytes) {
  if (text.size() <= bytes) return text;
  size_t from = text.size() - bytes;
  while (from < text.size() && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;
  std::string tail = text.substr(from);
  const size_t line = tail.find('\n');
  if (line != std::string::npos && line + 1 < tail.size()) tail = tail.substr(line + 1);
  return "...\n" + tail;
}

// The first `bytes` of `text`, not cutting a UTF-8 character in two.
std::string head_of(const std::string& text, size_t bytes) {
  if (text.size() <= bytes) return text;
  size_t end = bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;  // a continuation byte
  return text.substr(0, end);
}

// `out` followed by `line` on a line of its own.
std::string then_line(const std::string& out, const std::string& line) {
  if (out.empty()) return line;
  return out + (out.back() == '\n' ? "" : "\n") + line;
}

class PythonSandboxTool : public Tool {
 public:
  explicit PythonSandboxTool(const PythonToolOptions& options) : options_(options) {}

  std::string name() const override { return "python"; }

  nlohmann::ordered_json schema() const override {
    return {{"type", "function"},
            {"function",
             {{"name", "python"},
              {"description",
               fmt::format("Runs Python 3 code in a fresh sandbox without network or files (at most {:g} s) and "
                           "returns what it prints. Print the values you need.",
                           options_.limits.wall_s)},
              {"parameters",
               {{"type", "object"},
                {"properties", {{"code", {{"type", "string"}, {"description", "The Python 3 program to run."}}}}},
                {"required", {"code"}}}}}}};
  }

  ToolResult call(const nlohmann::json& arguments) override {
    ToolResult result;
    const auto code = arguments.find("code");
    if (code == arguments.end() || !code->is_string()) {
      result.error = true;
      result.observation = "error: the python tool takes {\"code\": \"<a Python program>\"}";
      return result;
    }
    SandboxResult run;
    try {
      run = run_python_sandboxed(code->get<std::string>(), options_.limits);
    } catch (const SandboxUnavailable& e) {
      throw ToolUnavailable(fmt::format("python tool: {}", e.what()));
    }
    result.seconds = run.seconds;
    const size_t budget = options_.max_observation_bytes;
    std::string out = run.stdout_text;
    if (run.stdout_truncated || out.size() > budget) out = head_of(out, budget) + "\n[output cut]";
    switch (run.end) {
      case SandboxEnd::exited:
        if (run.exit_code == 0) {
          result.observation = out.empty() ? "(no output)" : out;
          return result;
        }
        result.error = true;
        result.observation = then_line(out, fmt::format("exit status {}", run.exit_code));
        if (!run.stderr_text.empty()) result.observation += "\n" + tail_of(run.stderr_text, budget / 2);
        return result;
      case SandboxEnd::signaled:
        result.error = true;
        result.observation = then_line(out, describe_end(run, options_.limits) + " (a CPU or memory limit, or a crash)");
        return result;
      case SandboxEnd::timed_out:
        result.error = true;
        result.stop = "tool_timeout";
        result.observation = then_line(out, fmt::format("timed out after {:g} s", options_.limits.wall_s));
        return result;
    }
    return result;
  }

 private:
  PythonToolOptions options_;
};

}  // namespace

std::unique_ptr<Tool> make_python_sandbox_tool(const PythonToolOptions& options) {
  return std::make_unique<PythonSandboxTool>(options);
}

}  // namespace tandem
