// dcr_layout_testdata: writes a canonical base checkpoint and the checkpoint one optimizer step
// later for the model a Hugging Face config.json describes (synthetic BF16 training trajectory),
// for the layout CLI tests.
//
//   dcr_layout_testdata CONFIG BASE NEW [SEED]
#include <cstdio>
#include <string>

#include "layout/model_config.h"
#include "synth/trajectory.h"

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: dcr_layout_testdata CONFIG BASE NEW [SEED]\n");
    return 2;
  }
  auto model = dcr::ReadHfConfig(argv[1]);
  if (!model.ok()) {
    std::fprintf(stderr, "dcr_layout_testdata: %s\n", model.status().ToString().c_str());
    return 1;
  }
  const uint64_t seed = argc == 5 ? std::stoull(argv[4]) : 1;
  dcr::SynthTrajectory traj(dcr::SynthParamsForCatalog(dcr::CanonicalCatalog(*model)), {seed, 2e-5});
  dcr::Status s = traj.WriteSnapshot(argv[2]);
  traj.Step();
  if (s.ok()) s = traj.WriteSnapshot(argv[3]);
  if (!s.ok()) {
    std::fprintf(stderr, "dcr_layout_testdata: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
