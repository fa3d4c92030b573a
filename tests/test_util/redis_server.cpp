#include "test_util/redis_server.h"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "base/file.h"
#include "test_util/paths.h"

extern char** environ;

namespace prism::test {
namespace {

// A port the OS says is free now. Another process may take it before redis binds it: start()
// then sees redis exit and tries another.
int free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

bool answers_ping(const std::string& host, int port) {
  redisContext* c = redisConnectWithTimeout(host.c_str(), port, timeval{0, 200000});
  bool ok = false;
  if (c && !c->err) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
    ok = r && r->type == REDIS_REPLY_STATUS;
    if (r) freeReplyObject(r);
  }
  if (c) redisFree(c);
  return ok;
}

}  // namespace

std::string redis_server_binary() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  dirs += ":/usr/sbin:/usr/bin";
  size_t begin = 0;
  while (begin <= dirs.size()) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = dirs.substr(begin, end - begin) + "/redis-server";
    if (end > begin && access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  return "";
}

Result<std::unique_ptr<RedisServer>> RedisServer::start(const std::string& name) {
  const std::string binary = redis_server_binary();
  if (binary.empty())
    return not_found("redis-server is not installed (Debian package redis-server; scripts/ installs it)");
  std::unique_ptr<RedisServer> server(new RedisServer());
  // One folder per process: ctest runs the cases of one file as parallel processes.
  server->dir_ = scratch_dir("redis_" + name + "_" + std::to_string(getpid()));
  const std::string log = server->dir_ + "/redis.log";
  for (int attempt = 0; attempt < 5; ++attempt) {
    server->port_ = free_loopback_port();
    std::vector<std::string> args = {binary, "--port", std::to_string(server->port_), "--bind", server->host_,
                                     "--save", "", "--appendonly", "no", "--dir", server->dir_,
                                     "--logfile", log, "--daemonize", "no"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&server->pid_, binary.c_str(), nullptr, nullptr, argv.data(), environ) != 0)
      return unavailable("cannot start " + binary);
    for (int i = 0; i < 200; ++i) {  // up to 10 s
      if (answers_ping(server->host_, server->port_)) return server;
      int status = 0;
      if (waitpid(server->pid_, &status, WNOHANG) == server->pid_) {
        server->pid_ = -1;
        break;  // it exited: most likely the port was taken meanwhile
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    server->kill();
  }
  auto text = read_file(log);
  return unavailable("redis-server did not come up; its log:\n" + (text ? *text : std::string("(none)")));
}

void RedisServer::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

RedisServer::~RedisServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {  // up to 5 s, then SIGKILL
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill();
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace prism::test
