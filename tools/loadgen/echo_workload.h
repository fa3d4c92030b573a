// tools/loadgen/echo_workload.h: the "echo" workload (POST /v1/prism/echo): Prism's test engine
// answers each request with its input, so this measures the server's framework alone
// (HTTP, queues, batching) with no model behind it.
#pragma once

#include <memory>

#include "tools/loadgen/workload.h"

namespace prism::tools::loadgen {

std::unique_ptr<Workload> make_echo(const WorkloadOptions& options);

}  // namespace prism::tools::loadgen
