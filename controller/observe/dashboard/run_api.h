// The dashboard's JSON endpoints: what it reads from a run directory, shaped for the page.
// It only reads files (status.json, metrics.jsonl, worker_phases.jsonl, samples.jsonl,
// logs/*.log), so it works beside a running controller, inside it, or after the run.
//
// Threading: the HTTP server calls these from its worker threads; one mutex serialises
// them, which also serialises the two file followers they share. Each call is a bounded
// read (a tail, or only the bytes appended since the last call).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace tandem::dashboard {

class RunApi {
 public:
  explicit RunApi(std::string run_dir);
  ~RunApi();
  RunApi(const RunApi&) = delete;
  RunApi& operator=(const RunApi&) = delete;

  // Each returns a JSON document (see docs/dashboard.md, "Endpoints").

  // status.json with `controller_alive` (null when its host is another), `finished`,
  // `status_present`, `run_dir` and `now`.
  std::string status();
  // Every numeric metric of the steps after `after_step`, as columns: {"epoch", "steps",
  // "series": {key: [value | null]}, "last_step"}. At most `max_points` rows (evenly
  // thinned, the newest always kept). `epoch` changes when metrics.jsonl was replaced
  // or cut back (a resume): the page then drops what it has and asks from the start.
  std::string metrics(double after_step, size_t max_points);
  // The newest `count` rows of samples.jsonl, newest first; long strings shortened.
  std::string samples(size_t count);
  // worker_phases.jsonl rows after `after_step` (the newest `limit` of them).
  std::string phases(double after_step, size_t limit);
  // The newest `count` error and warning lines of logs/*.log, oldest first.
  std::string errors(size_t count);

 private:
  struct Followed;
  std::string run_dir_;
  std::mutex mutex_;
  std::unique_ptr<Followed> followed_;  // metrics and phases read so far
};

}  // namespace tandem::dashboard
