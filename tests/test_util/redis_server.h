// A throwaway redis-server for tests: its own free loopback port, no persistence, files in a
// scratch directory, stopped (SIGTERM, then SIGKILL) when the object goes away.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "base/status.h"

namespace prism::test {

// The redis-server binary on PATH (Debian's redis-server package), or "" when absent.
std::string redis_server_binary();

class RedisServer {
 public:
  // Starts one and waits until it answers PING. not_found when the binary is absent (tests
  // skip then, saying so); unavailable with its log when it does not come up.
  static Result<std::unique_ptr<RedisServer>> start(const std::string& name);
  ~RedisServer();

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  std::string address() const { return host_ + ":" + std::to_string(port_); }
  // Stops it now (SIGKILL): later commands fail as with a crashed or unreachable server.
  void kill();

 private:
  RedisServer() = default;
  std::string host_ = "127.0.0.1";
  int port_ = 0;
  pid_t pid_ = -1;
  std::string dir_;
};

}  // namespace prism::test
