#pragma once
// The subjects of tfd_process_tests (one test file each, selected by its Catch2 file tag,
// -# "[#cluster_k8s_test]") that run only on some machines: as root, with a tool installed, with
// MNIST. Such a file registers what it needs, a function that says why it cannot run here ("" when
// it can), and tfd_process_tests' main() (test/catch/process_main.cc) asks the subjects its command
// line selects: one that cannot run makes the binary exit 77 (ctest: skipped) with its one-line
// reason. Run with no subject selected, it leaves out those that cannot run and says which.

#include <string>

namespace tfd::testing {

// Why the subject cannot run here, or "" when it can; `spec` is the command line's test
// specification (tags and names), for a subject whose needs depend on which of its cases run.
using SubjectCheck = std::string (*)(const std::string& spec);

// A file's registration, at namespace scope: `const SubjectNeeds kNeeds(__FILE__, &CannotRunHere);`
class SubjectNeeds {
 public:
  SubjectNeeds(const char* file, SubjectCheck check);
};

// main() of tfd_process_tests: the checks above, then Catch2's session.
int RunSubjects(int argc, char** argv);

}  // namespace tfd::testing
