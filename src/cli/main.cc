// dcr: bit-exact delta-compressed refit. The command-line entry point.
#include <malloc.h>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/report.h"

namespace {

// Keeps freed buffers in the heap for reuse instead of returning them to the kernel: a codec's
// buffers of a few MB are freed and allocated again payload after payload (each a fresh
// mapping under glibc's defaults), and a fresh page costs a page fault on its first write: ~9
// us on one virtual machine measured here, where a two-thread plain encode of a 243 MB step
// into fresh output buffers took 40-45 ms against 28-32 ms into reused ones. Blocks above
// 64 MiB are still mapped apart (and returned when freed); at most 256 MiB of free heap top is
// kept.
void KeepFreedBuffers() {
  (void)mallopt(M_MMAP_THRESHOLD, 64 << 20);
  (void)mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

}  // namespace

int main(int argc, char** argv) {
  KeepFreedBuffers();
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
