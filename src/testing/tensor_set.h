// A set of tensors for unit tests that owns their bytes, for WriteSafetensors and
// WriteShardedCheckpoint. Header-only; link dcr_testing.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "format/dtype.h"
#include "format/safetensors.h"

namespace dcr::test {

// storage[i] holds the bytes of list[i]. list[i].data is only valid after Bind(), since Add may
// reallocate storage; copies must be bound again before use.
struct Tensors {
  std::vector<std::vector<uint8_t>> storage;
  std::vector<TensorToWrite> list;

  // Appends a dense tensor whose bytes are all zero.
  void Add(const std::string& name, DType t, std::vector<uint64_t> shape) {
    storage.emplace_back(*ShapeElements(shape) * DTypeWidth(t), 0);
    list.push_back({name, t, std::move(shape), {}, false});
  }
  // Appends a dense tensor whose bytes are drawn from `rng`, one draw per byte in order.
  void Add(const std::string& name, DType t, std::vector<uint64_t> shape, std::mt19937_64& rng) {
    std::vector<uint8_t> b(*ShapeElements(shape) * DTypeWidth(t));
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    storage.push_back(std::move(b));
    list.push_back({name, t, std::move(shape), {}, false});
  }

  // The bytes of the tensor called `name`; a test failure, and storage[0], when there is none.
  std::vector<uint8_t>& Bytes(const std::string& name) { return storage.at(IndexOf(name)); }
  const std::vector<uint8_t>& Bytes(const std::string& name) const { return storage.at(IndexOf(name)); }

  // Points every list[i].data at storage[i] and returns the list.
  const std::vector<TensorToWrite>& Bind() {
    for (size_t i = 0; i < list.size(); ++i) list[i].data = storage[i];
    return list;
  }

 private:
  size_t IndexOf(const std::string& name) const {
    for (size_t i = 0; i < list.size(); ++i)
      if (list[i].name == name) return i;
    ADD_FAILURE() << "no tensor " << name;
    return 0;
  }
};

}  // namespace dcr::test
