#pragma once
// The option group every tool shares (-v/--verbose, --log-level, -q/--quiet, --json) and
// the one place that maps exceptions to exit codes:
//   0 ok, CLI11's codes for usage errors, 1 runtime error, 2 verification ran and failed.
#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace mla::cli {

struct CommonOptions {
  bool verbose = false;
  bool quiet = false;
  std::string log_level = "info";
  std::string json_path;  // "-" for stdout; empty: no JSON
};

void add_common_options(CLI::App& app, CommonOptions& opts, bool with_json = true);
// Sets up spdlog (stderr) from the options.
void apply_logging(const CommonOptions& opts);
// Parses argv, applies logging, runs body; maps exceptions to exit codes.
int run_tool(CLI::App& app, CommonOptions& opts, int argc, char** argv,
             const std::function<int()>& body);
// An option that only qualifies another one (or works in one mode) is refused where it would be
// silently ignored: unless `ok`, the first of `opts` given on `app` throws mla::InputError
// "OPT is read with WITH only" + note.
void require_with(const CLI::App& app, bool ok, std::initializer_list<const char*> opts, const std::string& with,
                  const std::string& note = "");
// Writes a JSON text to opts.json_path ("-" = stdout) atomically (temp file + rename).
void write_json_output(const std::string& path, const std::string& text);

}  // namespace mla::cli
