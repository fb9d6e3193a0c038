#pragma once

#include <ostream>

namespace tfd::export_command {

// `tfd export --checkpoint DIR|FILE --out BASE [--job JOB.json]` (docs/serving.md): the newest valid
// checkpoint in DIR (or FILE) written as the next version folder of BASE, as a run's chief exports
// at its end. Any checkpoint of any mode (ps-sharded, model-parallel, allreduce, GPU-trained: all
// hold whole tensors). The model's card comes from the checkpoint; one written before checkpoints
// carried it needs --job, whose data is loaded to make it. argv[0] is "export". Returns the exit
// code: 0, or 2 with one line on stderr.
int Run(int argc, char** argv, std::ostream& out);

}  // namespace tfd::export_command
