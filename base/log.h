// Logging through spdlog. info: lifecycle and resolved config once; warn: a knob disabled and
// why; error: a failed request with its request_id. Per-step facts are metrics, not logs.
#pragma once

#include <spdlog/spdlog.h>

#define PRISM_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define PRISM_LOG_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define PRISM_LOG_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define PRISM_LOG_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)
