// The layout-aware forms of `dcr diff --layout` and `dcr apply --layout` (cli/cmd_layout.cc),
// called from the file commands (cli/cmd_files.cc) when --layout is given.
#pragma once

#include <cstdint>
#include <string>

namespace dcr::cli {

struct LayoutDiffRequest {
  std::string layout_dir, base_shards, new_shards, out;
  bool json = false, overwrite = false, progress = false;
  int threads = 0;
  uint64_t chunk_mib = 32;
};
int RunLayoutDiff(const LayoutDiffRequest& r);

struct LayoutApplyRequest {
  std::string layout_dir, delta, shards;
  bool json = false, progress = false, no_base_check = false;
  int threads = 0;
};
int RunLayoutApply(const LayoutApplyRequest& r);

}  // namespace dcr::cli
