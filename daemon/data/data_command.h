#pragma once

#include <ostream>

namespace tfd::data_command {

// `tfd data inspect SOURCE|JOB.json [--json]`: reads a data source (a file, a folder, or a job
// file's "data") as training would, and prints its rows, example shape, classes with counts, the
// first features' ranges and warnings. `argv[0]` is "data". Returns the exit code: 0, or 2 with one
// line on stderr for bad usage or bad data.
int Run(int argc, char** argv, std::ostream& out);

}  // namespace tfd::data_command
