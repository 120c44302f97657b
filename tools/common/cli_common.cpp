#include "common/cli_common.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <new>
#include <system_error>

#include "core/error.hpp"
#include "io/resources.hpp"

namespace mla::cli {

void add_common_options(CLI::App& app, CommonOptions& opts, bool with_json) {
  app.add_flag("-v,--verbose", opts.verbose, "Log debug detail to stderr");
  app.add_flag("-q,--quiet", opts.quiet, "Log only errors");
  app.add_option("--log-level", opts.log_level, "trace|debug|info|warn|error|off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  if (with_json) app.add_option("--json", opts.json_path, "Also write results as JSON to FILE ('-' for stdout)");
  app.set_version_flag("--version", std::string("mla-toolchain ") + MLA_VERSION_STRING);
}

void apply_logging(const CommonOptions& opts) {
  auto logger = spdlog::stderr_color_mt("mla");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%H:%M:%S.%e] %^%l%$ %v");
  auto level = spdlog::level::from_str(opts.log_level);
  if (opts.verbose) level = spdlog::level::debug;
  if (opts.quiet) level = spdlog::level::err;
  spdlog::set_level(level);
}

int run_tool(CLI::App& app, CommonOptions& opts, int argc, char** argv, const std::function<int()>& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  apply_logging(opts);
  try {
    return body();
  } catch (const VerificationError& e) {
    spdlog::error("verification failed: {}", e.what());
    return 2;
  } catch (const std::bad_alloc&) {  // one not caught with more context nearer its cause
    spdlog::error("{}", mla::io::out_of_memory_message("running " + app.get_name(), 0));
    return 1;
  } catch (const std::system_error& e) {  // e.g. no memory for another thread's stack
    if (e.code() == std::errc::resource_unavailable_try_again || e.code() == std::errc::not_enough_memory) {
      spdlog::error("{}", mla::io::out_of_memory_message("starting threads of " + app.get_name() + " (" + e.what() + ")", 0));
      return 1;
    }
    spdlog::error("{}", e.what());
    return 1;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}

void require_with(const CLI::App& app, bool ok, std::initializer_list<const char*> opts, const std::string& with,
                  const std::string& note) {
  if (ok) return;
  for (const char* opt : opts)
    if (app.count(opt) > 0) throw InputError(std::string(opt) + " is read with " + with + " only" + note);
}

void write_json_output(const std::string& path, const std::string& text) {
  if (path.empty()) return;
  if (path == "-") {
    std::cout << text << "\n";
    return;
  }
  const std::filesystem::path final_path(path);
  const std::filesystem::path tmp = final_path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("cannot write JSON output '" + tmp.string() + "'");
    out << text << "\n";
    if (!out.flush()) throw Error("write failed for '" + tmp.string() + "'");
  }
  std::filesystem::rename(tmp, final_path);
}

}  // namespace mla::cli
