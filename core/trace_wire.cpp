#include "core/trace_wire.h"

#include "core/command_codec.h"
#include "core/net_address.h"
#include "core/trace.h"
#include "core/worker_commands.capnp.h"

#include <unistd.h>

namespace tandem::trace {

std::string clock_reply_body() {
  return encode_body<wire::TraceClock>([](wire::TraceClock::Builder out) { out.setNowUs(now_us()); });
}

std::string collected_reply_body() {
  const std::vector<SpanRecord> spans = take();
  const std::map<int32_t, std::string> threads = thread_names();
  return encode_body<wire::TraceCollected>([&](wire::TraceCollected::Builder out) {
    out.setPid(static_cast<uint32_t>(::getpid()));
    out.setHost(this_hostname());
    out.setNowUs(now_us());
    out.setDropped(take_dropped());
    auto thread_list = out.initThreads(static_cast<unsigned>(threads.size()));
    unsigned t = 0;
    for (const auto& [tid, name] : threads) {
      thread_list[t].setTid(tid);
      thread_list[t].setName(name);
      ++t;
    }
    auto span_list = out.initSpans(static_cast<unsigned>(spans.size()));
    for (unsigned i = 0; i < spans.size(); ++i) {
      span_list[i].setName(spans[i].name);
      span_list[i].setCategory(spans[i].category);
      span_list[i].setStartUs(spans[i].start_us);
      span_list[i].setDurationUs(spans[i].duration_us);
      span_list[i].setTid(spans[i].thread_id);
      span_list[i].setCount(spans[i].count);
    }
  });
}

int64_t read_clock_reply(const std::string& body, const std::string& what) {
  return Body<wire::TraceClock>(body, what)->getNowUs();
}

nlohmann::json read_collected_reply(const std::string& body, const std::string& what) {
  const Body<wire::TraceCollected> in(body, what);
  nlohmann::json threads = nlohmann::json::object();
  for (const auto t : in->getThreads()) threads[std::to_string(t.getTid())] = to_string(t.getName());
  nlohmann::json rows = nlohmann::json::array();
  for (const auto s : in->getSpans()) {
    rows.push_back({to_string(s.getName()), to_string(s.getCategory()), s.getStartUs(), s.getDurationUs(), s.getTid(),
                    s.getCount()});
  }
  return {{"pid", static_cast<int64_t>(in->getPid())},
          {"host", to_string(in->getHost())},
          {"now_us", in->getNowUs()},
          {"dropped", in->getDropped()},
          {"threads", threads},
          {"spans", rows}};
}

}  // namespace tandem::trace
