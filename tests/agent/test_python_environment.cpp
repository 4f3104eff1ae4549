// Python environments (agent/python_environment.h): `tandem env-worker` processes hold
// the instances; reset() makes the prompt through the chat template; step() answers with
// an observation, a reward and done (4- and 5-tuples); what the environment's code gets
// wrong is an Error naming it (start) or an error the model reads (step); a step past its
// deadline kills its worker, whose other instances are then lost (ToolUnavailable), and a
// fresh worker serves new ones.
#include "agent/python_environment.h"
#include "core/error.h"
#include "core/files.h"

#include <doctest/doctest.h>

#include <fstream>
#include <thread>

using namespace tandem;

namespace {

constexpr const char* kGame = R"PY(
import time

class Counter:
    """Says the running total; done when it reaches the row's target."""
    def __init__(self, row, start=0):
        self.target = row["target"]  # an int: rows keep their JSON types
        self.total = start

    def reset(self):
        return [{"role": "system", "content": "Add numbers."},
                "Reach %d." % self.target]

    def step(self, action):
        if action == "crash":
            raise ValueError("cannot add " + action)
        if action == "sleep":
            time.sleep(30)
        if action == "nan":
            return "x", float("nan"), False, {}
        if action == "gym":
            return "gym style", 0.5, False, True, {}
        self.total += int(action)
        done = self.total >= self.target
        return ("total %d" % self.total), (1.0 if done else 0.0), done, {"total": self.total}

class NoStep:
    def __init__(self, row):
        pass
    def reset(self):
        return "hi"

class BadInit:
    def __init__(self):
        pass
    def reset(self):
        return "hi"
    def step(self, action):
        return "", 0, True, {}

class SilentReset:
    def __init__(self, row):
        pass
    def reset(self):
        return None
    def step(self, action):
        return "", 0, True, {}
)PY";

// A template that writes each message as [role]content| and ends with [assistant].
const nlohmann::json kTemplate = {
    {"source", "{% for m in messages %}[{{ m.role }}]{{ m.content }}|{% endfor %}"
               "{% if add_generation_prompt %}[assistant]{% endif %}"},
    {"special_tokens", nlohmann::json::object()},
    {"variables", nlohmann::json::object()}};

PythonEnvironmentOptions options(const std::string& file, const std::string& class_name, int workers = 1,
                                 double timeout_s = 10) {
  PythonEnvironmentOptions o;
  o.file = file;
  o.class_name = class_name;
  o.workers = workers;
  o.timeout_s = timeout_s;
  o.chat_template = kTemplate;
  o.tandem_binary = TANDEM_BINARY;
  return o;
}

std::string write_game(const TempDir& dir) {
  const std::string file = dir.path() + "/game.py";
  std::ofstream(file) << kGame;
  return file;
}

}  // namespace

TEST_CASE("python environment: reset renders the prompt; steps add up to done; instances are separate") {
  TempDir dir;
  PythonEnvironmentOptions o = options(write_game(dir), "Counter", 2);
  o.kwargs = {{"start", 1}};
  std::unique_ptr<EnvironmentPool> pool = make_python_environment_pool(o);
  const nlohmann::json before = nlohmann::json::array({{{"role", "system"}, {"content", "Be brief."}}});
  const EnvironmentStart a = pool->start({{"target", 4}}, before);
  const EnvironmentStart b = pool->start({{"target", 2}}, nlohmann::json::array());
  CHECK(a.id != b.id);
  REQUIRE(a.messages.size() == 2);
  CHECK(a.messages[0].role == "system");
  CHECK(a.messages[1].role == "user");  // a bare string is a user message
  CHECK(a.messages[1].content == "Reach 4.");
  CHECK(a.prompt == "[system]Be brief.|[system]Add numbers.|[user]Reach 4.|[assistant]");
  CHECK(b.prompt == "[system]Add numbers.|[user]Reach 2.|[assistant]");

  EnvironmentStep s = pool->step(a.id, "2");  // 1 + 2
  CHECK_FALSE(s.done);
  CHECK_FALSE(s.error);
  CHECK(s.reward == 0.0);
  REQUIRE(s.messages.size() == 1);
  CHECK(s.messages[0].content == "total 3");
  s = pool->step(b.id, "5");  // b's own total: 1 + 5
  CHECK(s.done);
  CHECK(s.reward == 1.0);
  s = pool->step(a.id, "1");
  CHECK(s.done);
  CHECK(s.messages[0].content == "total 4");

  s = pool->step(a.id, "gym");  // (obs, reward, terminated, truncated, info)
  CHECK(s.done);
  CHECK(s.reward == 0.5);
  s = pool->step(a.id, "crash");  // the model reads the error
  CHECK(s.error);
  REQUIRE(s.messages.size() == 1);
  CHECK(s.messages[0].content.find("ValueError: cannot add crash") != std::string::npos);
  s = pool->step(a.id, "nan");
  CHECK(s.error);
  CHECK(s.messages[0].content.find("finite") != std::string::npos);

  // Many instances at once from several threads: each keeps its own total.
  std::vector<uint64_t> ids;
  for (int i = 0; i < 8; ++i) ids.push_back(pool->start({{"target", 100}}, nlohmann::json::array()).id);
  std::vector<std::thread> threads;
  std::vector<std::string> last(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    threads.emplace_back([&, i] {
      for (size_t k = 0; k <= i; ++k) last[i] = pool->step(ids[i], "1").messages.at(0).content;
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < ids.size(); ++i) CHECK(last[i] == "total " + std::to_string(i + 2));
  pool->close(ids[0]);
  CHECK_THROWS_AS(pool->step(ids[0], "1"), ToolUnavailable);  // closed
}

TEST_CASE("python environment: a step past its deadline kills its worker; the others' instances are lost") {
  TempDir dir;
  std::unique_ptr<EnvironmentPool> pool = make_python_environment_pool(options(write_game(dir), "Counter", 1, 1.0));
  const EnvironmentStart slow = pool->start({{"target", 3}}, nlohmann::json::array());
  const EnvironmentStart other = pool->start({{"target", 3}}, nlohmann::json::array());
  const auto begin = std::chrono::steady_clock::now();
  const EnvironmentStep s = pool->step(slow.id, "sleep");
  CHECK(std::chrono::steady_clock::now() - begin < std::chrono::seconds(20));
  CHECK(s.timeout);
  CHECK(s.error);
  CHECK_THROWS_AS(pool->step(other.id, "1"), ToolUnavailable);  // its worker was replaced
  // The fresh worker serves new instances.
  const EnvironmentStart again = pool->start({{"target", 1}}, nlohmann::json::array());
  CHECK(pool->step(again.id, "1").done);
}

TEST_CASE("python environment: a bad file, class or reset is an error naming it") {
  TempDir dir;
  const std::string file = write_game(dir);
  auto message = [&](const std::string& f, const std::string& class_name) {
    try {
      make_python_environment_pool(options(f, class_name));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(message(file, "Missing").find("has no class Missing (its functions and classes: ") != std::string::npos);
  CHECK(message(file, "NoStep").find("no step() method") != std::string::npos);
  CHECK(message(file, "BadInit").find("__init__ must take (self, row, **kwargs)") != std::string::npos);
  CHECK(message(dir.path() + "/absent.py", "Counter").find("absent.py") != std::string::npos);

  std::unique_ptr<EnvironmentPool> pool = make_python_environment_pool(options(file, "SilentReset"));
  try {
    pool->start(nlohmann::json::object(), nlohmann::json::array());
    FAIL("reset() returning None was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("reset() returned no message") != std::string::npos);
  }
  std::unique_ptr<EnvironmentPool> counter = make_python_environment_pool(options(file, "Counter"));
  try {
    counter->start({{"no_target", 1}}, nlohmann::json::array());  // __init__ raises KeyError
    FAIL("a raising __init__ was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("KeyError") != std::string::npos);
  }
}
