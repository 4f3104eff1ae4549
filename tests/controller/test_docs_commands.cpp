// The commands of every page under docs/, exactly as the pages write them: each ```sh
// block runs in order from a fresh directory laid out as the repository root (configs/
// is the clone's), with `tandem` on PATH, after the page's files (a fenced block after
// `<!-- file: NAME -->`) are written there. Two kinds of blocks are not run, each marked
// on its page: a **Download step** (the network), whose products the test puts where the
// page says they land, and a block after `<!-- doc-test: skip (why) -->`. A new block
// without a marker runs here, so a page cannot document a command that does not work.
// A plain ``` fence holding a `tandem ...` line counts as a shell block too; indented
// blocks are synopses with placeholders (`tandem status RUN_DIR`) and are not run.
//
// docs/gsm8k.md needs ../shared/data/gsm8k and Qwen3's tokenizer files
// (tests/support/gsm8k_assets.h): its case reports a skip (exit 77) without the data, and fails
// without the tokenizer unless TANDEM_OFFLINE=1.
#include "core/files.h"
#include "core/process.h"
#include "tests/support/gsm8k_assets.h"
#include "tests/support/run_tandem.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

using namespace tandem;
using namespace tandem::testing;
namespace fs = std::filesystem;

namespace {

struct DocBlock {
  std::string text;
  bool run = true;
  std::string why_not;  // the marker that left it out
  size_t line = 0;      // of its opening fence, from 1
};

struct DocFile {
  std::string name;  // from `<!-- file: NAME -->`
  std::string text;
};

// The page's fenced blocks marked as files, in order.
std::vector<DocFile> file_blocks(const std::string& page) {
  std::vector<DocFile> files;
  const std::string marker = "<!-- file: ";
  for (size_t at = page.find(marker); at != std::string::npos; at = page.find(marker, at + 1)) {
    const size_t name_end = page.find(" -->", at);
    const size_t fence = page.find("```", name_end);
    const size_t body = page.find('\n', fence) + 1;
    const size_t end = page.find("\n```", body - 1);
    REQUIRE(end != std::string::npos);
    files.push_back({page.substr(at + marker.size(), name_end - at - marker.size()), page.substr(body, end - body + 1)});
  }
  return files;
}

// The page's ```sh blocks, each with whether the page marks it as not run here.
std::vector<DocBlock> shell_blocks(const std::string& page) {
  std::vector<DocBlock> blocks;
  std::vector<std::string> lines;
  std::istringstream in(page);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  auto holds_tandem_command = [&](size_t fence) {
    for (size_t k = fence + 1; k < lines.size() && lines[k] != "```"; ++k) {
      if (lines[k].rfind("tandem ", 0) == 0) return true;
    }
    return false;
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("```", 0) != 0) continue;
    if (lines[i] != "```sh" && !(lines[i] == "```" && holds_tandem_command(i))) {
      // Another language's block (or a plain one without commands): past its end.
      for (++i; i < lines.size() && lines[i] != "```"; ++i) {
      }
      continue;
    }
    DocBlock block;
    block.line = i + 1;
    // The nearest non-blank line before the fence says whether it runs here.
    for (size_t k = i; k-- > 0;) {
      if (lines[k].find_first_not_of(' ') == std::string::npos) continue;
      if (lines[k].rfind("<!-- doc-test: skip", 0) == 0) {
        block.run = false;
        block.why_not = lines[k];
      }
      break;
    }
    // A **Download step** paragraph governs the block that follows it.
    for (size_t k = i; k-- > 0 && lines[k].rfind("```", 0) != 0 && lines[k].rfind("#", 0) != 0;) {
      if (lines[k].find("**Download step**") != std::string::npos) {
        block.run = false;
        block.why_not = "a download step";
      }
    }
    size_t end = i + 1;
    for (; end < lines.size() && lines[end] != "```"; ++end) block.text += lines[end] + "\n";
    REQUIRE_MESSAGE(end < lines.size(), "the block at line ", block.line, " is not closed");
    blocks.push_back(block);
    i = end;
  }
  return blocks;
}

// A fresh directory laid out as the repository root, with `tandem` on PATH.
std::string page_root(const TempDir& dir) {
  const std::string root = dir.path();
  fs::create_directories(root + "/bin");
  fs::create_symlink(TANDEM_BINARY, root + "/bin/tandem");
  fs::create_directory_symlink(kSource + "/configs", root + "/configs");
  return root;
}

// Writes the page's files into `root`, then runs its shell blocks in order; returns how
// many ran.
size_t run_page(const std::string& name, const std::string& root) {
  const std::string page = read_file(kSource + "/docs/" + name).value_or("");
  REQUIRE_FALSE(page.empty());
  for (const DocFile& file : file_blocks(page)) write_file_atomic(root + "/" + file.name, file.text);
  size_t ran = 0;
  for (const DocBlock& block : shell_blocks(page)) {
    INFO("docs/" << name << ":" << block.line << "\n" << block.text);
    if (!block.run) {
      MESSAGE("docs/" << name << ":" << block.line << " not run: " << block.why_not);
      continue;
    }
    const std::string out = fmt::format("{}/block_{}.out", root, block.line);
    const std::string script = fmt::format("{}/block_{}.sh", root, block.line);
    write_file_atomic(script, "set -e\n" + block.text);
    ChildProcess shell = ChildProcess::spawn(
        {"/bin/sh", "-c", fmt::format("cd '{}' && export PATH='{}/bin':\"$PATH\" && . '{}'", root, root, script)},
        {out, false});
    const auto status = shell.wait_for(420);
    REQUIRE_MESSAGE(status.has_value(), "did not finish in 420 s: ", read_text(out));
    CHECK_MESSAGE(status->success(), status->describe(), ":\n", read_text(out));
    ++ran;
  }
  return ran;
}

}  // namespace

TEST_CASE("every other page of docs/: its commands run as written, or the page says why not") {
  for (const auto& entry : fs::directory_iterator(kSource + "/docs")) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".md" || name == "gsm8k.md") continue;
    INFO(name);
    TempDir dir;
    run_page(name, page_root(dir));
  }
}

TEST_CASE("docs/gsm8k.md: every command runs as written") {
  skip_unless_present();
  TempDir dir;
  const std::string root = page_root(dir);
  // What the download steps would leave.
  fs::create_directories(root + "/models/Qwen3-0.6B");
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(kQwen3 + "/" + file, root + "/models/Qwen3-0.6B/" + file);
  }
  fs::create_directories(root + "/data/gsm8k");
  for (const char* split : {"train", "test"}) {
    fs::create_symlink(fmt::format("{}/{}.jsonl", kGsm8k, split), fmt::format("{}/data/gsm8k/{}.jsonl", root, split));
  }
  small_qwen3(root, root + "/models/Qwen2.5-0.5B-Instruct");

  const size_t ran = run_page("gsm8k.md", root);
  CHECK(ran >= 4);  // validate, the small model, its rows, the scaled-down run
  // What the page says the last run leaves.
  const std::vector<nlohmann::json> metrics = read_json_lines(root + "/runs/gsm8k-small/metrics.jsonl");
  bool val_after_training = false, gsm8k_parts = false;
  for (const nlohmann::json& row : metrics) {
    val_after_training |= row.value("step", 0) == 2 && row.contains("val/accuracy");
    gsm8k_parts |= row.contains("reward/gsm8k/format") && row.contains("reward/gsm8k/acc");
  }
  CHECK(val_after_training);
  CHECK(gsm8k_parts);
  CHECK(fs::exists(root + "/runs/gsm8k-small/plots/index.html"));
  CHECK(fs::exists(root + "/runs/gsm8k-small/policy/tokenizer.json"));
}
