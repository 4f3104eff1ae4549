// safetensors files (Hugging Face's weight format): read by mmap, written atomically,
// sharded checkpoints through model.safetensors.index.json.
//
// Format: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data buffer. Every byte of the buffer belongs to exactly one tensor.
// Opening validates all of it: a malformed or truncated file is an Error naming the
// file and what is wrong, never a crash or an out-of-bounds read.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

enum class DType { f64, f32, f16, bf16, i64, i32, i16, i8, u8, boolean };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // safetensors spelling: "F32", "BF16", ...
// Throws Error for names outside the list above.
DType dtype_from_name(const std::string& name);

struct TensorView {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping; valid while the file is open
  size_t bytes = 0;
  int64_t numel() const;
};

// Tells the kernel that the view's bytes are read: their pages of the mapping leave this
// process's memory (they are read from the file again if touched). Loading a model
// calls it after converting each tensor, so the mapped file and the converted weights
// are not both resident at the peak.
void release_pages(const TensorView& view);

// Converts any floating dtype (f64, f32, f16, bf16) to float32.
std::vector<float> tensor_to_float(const TensorView& tensor);

class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const;
  // Throws Error naming the file and the tensor (with a did-you-mean) when absent.
  const TensorView& get(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::string bytes;  // raw little-endian data, numel * dtype_size bytes
};

// Writes a safetensors file: to `path`.tmp, fsync, rename. Tensors are laid out in
// name order, as Hugging Face's writer does.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The weights of a model directory: model.safetensors, or the shards listed by
// model.safetensors.index.json ("weight_map": tensor name -> shard file).
class SafetensorsModel {
 public:
  static SafetensorsModel open_directory(const std::string& directory);
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return location_.count(name) != 0; }
  const TensorView& get(const std::string& name) const;

 private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> location_;
  std::string directory_;
};

// Writes `tensors` as shards of at most `max_shard_bytes` (one tensor never splits)
// plus model.safetensors.index.json; a single shard is written as model.safetensors.
void write_safetensors_sharded(const std::string& directory, const std::vector<TensorToWrite>& tensors,
                               size_t max_shard_bytes);

}  // namespace tandem
