// main() of tfd_process_tests: asks the subjects the command line selects whether they can run
// here (test/catch/subjects.h), then runs Catch2's session.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "test/catch/session.h"
#include "test/catch/subjects.h"

namespace tfd::testing {
namespace {

constexpr int kSubjectSkipped = 77;  // CMake's SKIP_RETURN_CODE

struct Subject {
  std::string tag;  // "[#cluster_k8s_test]": Catch2's tag for the file's cases under -#
  SubjectCheck check;
};

std::vector<Subject>& Subjects() {
  static std::vector<Subject> subjects;  // filled by static registrations, before main()
  return subjects;
}

}  // namespace

SubjectNeeds::SubjectNeeds(const char* file, SubjectCheck check) {
  Subjects().push_back({"[#" + std::filesystem::path(file).stem().string() + "]", check});
}

int RunSubjects(int argc, char** argv) {
  std::string spec;  // every argument that names a file tag: the subjects selected
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).find("[#") != std::string::npos) spec += std::string(argv[i]) + " ";
  // With no argument at all, every subject runs but those that cannot here, left out; with
  // arguments that select no subject by its tag (a case's name, say), the cases run as asked.
  if (spec.empty() && argc > 1) return RunCatchSession(argc, argv);
  std::string exclude = "~[.]";
  for (const Subject& s : Subjects()) {
    if (!spec.empty() && spec.find(s.tag) == std::string::npos) continue;
    const std::string why = s.check(spec);
    if (why.empty()) continue;
    if (!spec.empty()) {
      std::fprintf(stderr, "skipped: %s\n", why.c_str());
      return kSubjectSkipped;
    }
    std::fprintf(stderr, "left out %s: %s\n", s.tag.c_str(), why.c_str());
    exclude += "~" + s.tag;
  }
  if (!spec.empty()) return RunCatchSession(argc, argv);
  std::vector<char*> args = {argv[0], const_cast<char*>("-#"), exclude.data()};
  return RunCatchSession(static_cast<int>(args.size()), args.data());
}

}  // namespace tfd::testing

int main(int argc, char** argv) { return tfd::testing::RunSubjects(argc, argv); }
