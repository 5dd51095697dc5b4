#pragma once

#include <string>
#include <vector>

namespace kvferry::cli {

// Each returns a process exit code; args are the positional arguments after the command.
int RunDemo(const std::vector<std::string>& args);
int RunBench(const std::vector<std::string>& args);
int RunCodec(const std::vector<std::string>& args);

}  // namespace kvferry::cli
