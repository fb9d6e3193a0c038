#pragma once

#include <ostream>

namespace tfd::serve_command {

// `tfd serve --model BASE [...]` (docs/serving.md, "Serving"): serves the newest version folder of
// BASE with TensorFlow Serving's REST API until SIGINT or SIGTERM, switching to newer versions as
// they appear. `argv[0]` is "serve". Returns the exit code: 0 after a signal, 1 when the address
// cannot be bound, 2 with one line on stderr for bad flags or a missing or corrupt model.
int Run(int argc, char** argv, std::ostream& out);

}  // namespace tfd::serve_command
