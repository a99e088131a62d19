// dcr: bit-exact delta-compressed refit. The command-line entry point.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/report.h"

int main(int argc, char** argv) {
  CLI::App app{
      "dcr - bit-exact delta-compressed refit.\n"
      "Sends only the weight bits that changed between two versions of a model, and applies\n"
      "them in place so the receiver ends with exactly the bits of the new checkpoint.",
      "dcr"};
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 ok; 1 verify found a difference; 2 usage or invalid argument; 3 not found;\n"
      "4 I/O error; 5 corrupt input (checksum/structure); 6 catalog mismatch (names, dtypes,\n"
      "shapes); 7 wrong base (target does not hold the delta's base); 8 unsupported format\n"
      "version; 9 internal error. Run `dcr <command> --help` for each command.");
  int exit_code = 0;
  dcr::cli::RegisterFileCommands(app, &exit_code);
  dcr::cli::RegisterInspectCommand(app, &exit_code);
  dcr::cli::RegisterDemoCommand(app, &exit_code);
  dcr::cli::RegisterLayoutCommands(app, &exit_code);
  dcr::cli::RegisterBenchCommand(app, &exit_code);
  dcr::cli::RegisterRefitCommands(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and friends exit 0; every real parse error is a usage error.
    return app.exit(e) == 0 ? 0 : dcr::cli::kExitUsage;
  }
  return exit_code;
}
