// Subcommand registration. Each Register* adds its subcommands to `app`; when one runs it
// stores its exit code in *exit_code.
#pragma once

#include <CLI/CLI.hpp>

namespace dcr::cli {

void RegisterFileCommands(CLI::App& app, int* exit_code);  // diff apply verify digest
void RegisterInspectCommand(CLI::App& app, int* exit_code);
void RegisterDemoCommand(CLI::App& app, int* exit_code);
void RegisterLayoutCommands(CLI::App& app, int* exit_code);  // layout generate/check, shard
void RegisterBenchCommand(CLI::App& app, int* exit_code);  // bench codec
void RegisterRefitCommands(CLI::App& app, int* exit_code);  // serve push status

}  // namespace dcr::cli
