// The JSON form of a layout (docs/layout.md) and layout directories: one file per rank,
// rank-00000.json, rank-00001.json, ... Reading is strict: unknown keys, wrong types and other
// format versions are refused, so a typo never silently changes what a layout means.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "layout/layout.h"

namespace dcr {

// "rank-00003.json"
std::string LayoutFileName(uint32_t rank);

std::string LayoutToJson(const RankLayout& layout);
// Parses and checks the JSON form (not the layout's invariants: see ValidateRankLayout).
// `origin` names the source in errors.
Result<RankLayout> LayoutFromJson(std::string_view text, const std::string& origin);

// Writes every rank's file into `dir` (created if missing). Refuses a directory that already holds
// layout files of ranks outside the set, so a directory never mixes two layouts.
Status WriteLayoutDir(const std::string& dir, const LayoutSet& set);

// Reads every rank's file from `dir` and validates the set (ValidateLayoutSet). Missing ranks,
// files whose rank disagrees with their name, and stray rank files are errors.
Result<LayoutSet> ReadLayoutDir(const std::string& dir);

}  // namespace dcr
