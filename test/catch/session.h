#pragma once
// Runs Catch2's session over the command line (test names, tags, reporters) and returns its exit
// code: what the main() of every test binary ends with, whichever has its own (test/catch/catch_main.cc
// is the one for the others). Defined in test/catch/catch_impl.cc, the one file that compiles Catch2.

namespace tfd::testing {

int RunCatchSession(int argc, char** argv);

}  // namespace tfd::testing
