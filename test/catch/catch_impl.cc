// Catch2's implementation, compiled once for every test binary (alone it takes longer to compile
// than most test files); test/catch/catch_main.cc is the main() of the binaries without their own.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "test/catch/session.h"

namespace tfd::testing {

int RunCatchSession(int argc, char** argv) { return Catch::Session().run(argc, argv); }

}  // namespace tfd::testing
