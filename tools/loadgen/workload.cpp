// tools/loadgen/workload.cpp: the table of workloads. A new workload adds one row.
#include "tools/loadgen/workload.h"

#include "tools/loadgen/chat_workloads.h"
#include "tools/loadgen/echo_workload.h"
#include "tools/loadgen/embed_workloads.h"

namespace prism::tools::loadgen {

namespace {

struct WorkloadEntry {
  const char* name;
  std::unique_ptr<Workload> (*make)(const WorkloadOptions&);
};

constexpr WorkloadEntry kWorkloads[] = {
    {"embed-online", make_embed_online},
    {"embed-bulk", make_embed_bulk},
    {"chat", make_chat},
    {"chat-shared-prefix", make_chat_shared_prefix},
    {"echo", make_echo},
};

}  // namespace

std::vector<std::string> workload_names() {
  std::vector<std::string> names;
  for (const WorkloadEntry& e : kWorkloads) names.emplace_back(e.name);
  return names;
}

Result<std::unique_ptr<Workload>> make_workload(std::string_view name, const WorkloadOptions& options) {
  for (const WorkloadEntry& e : kWorkloads)
    if (name == e.name) return e.make(options);
  std::string list;
  for (const WorkloadEntry& e : kWorkloads) list += (list.empty() ? "" : ", ") + std::string(e.name);
  return invalid_argument("unknown workload '" + std::string(name) + "' (workloads: " + list + ")");
}

std::string request_body(nlohmann::json body, const WorkloadOptions& options) {
  if (options.extra_body.is_object())
    for (const auto& [k, v] : options.extra_body.items()) body[k] = v;
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace prism::tools::loadgen
