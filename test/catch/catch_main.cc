// main() of every test binary that has no main() of its own (a binary with its own may skip, exit
// 77, before it runs the session; see test/CMakeLists.txt).
#include "test/catch/session.h"

int main(int argc, char** argv) { return tfd::testing::RunCatchSession(argc, argv); }
