// Config parsing: the values land in the structs, and every class of error names the file,
// the line and the key.
#include "serving/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace prism::serving {
namespace {

// The error for `text`, which must fail to parse.
std::string error_of(const std::string& text) {
  Result<Config> c = parse_config(text, "prism.toml");
  EXPECT_FALSE(c.has_value()) << "expected an error for:\n" << text;
  return c.has_value() ? std::string() : c.status().message();
}

void expect_error(const std::string& text, int line, const std::string& key, const std::string& also = "") {
  std::string m = error_of(text);
  EXPECT_NE(m.find("prism.toml:" + std::to_string(line) + ":"), std::string::npos) << m;
  EXPECT_NE(m.find("'" + key + "'"), std::string::npos) << m;
  if (!also.empty()) {
    EXPECT_NE(m.find(also), std::string::npos) << m;
  }
}

TEST(Config, FullFileParses) {
  const std::string text = R"([server]
host = "0.0.0.0"
port = 9000
api_keys = ["k1", "k2"]

[server.limits]
max_body_bytes = 1048576
max_header_bytes = 8192
read_timeout_ms = 5000
idle_timeout_ms = 7000
request_timeout_ms = 9000
shutdown_grace_ms = 2000
max_connections = 100
num_io_threads = 3

[[deployment]]
name = "minilm"
task = "embed"
model = "/models/all-MiniLM-L6-v2"
replicas = 2
precision = "bf16"
priority_lanes = false
timeout_ms = 1500

[deployment.batching]
max_batch_size = 64
max_batch_tokens = 8192
padded_cost = true
max_queue_delay_us = 2000
queue_capacity = 500
preferred_batch_sizes = [8, 16, 32]

[deployment.knobs]
embedding_dims = 256
normalize = true
pooling = "mean"
scale = 0.5

[[deployment]]
name = "echo"
task = "echo"
)";
  Result<Config> r = parse_config(text, "prism.toml");
  ASSERT_TRUE(r.has_value()) << r.status().message();
  const Config& c = *r;
  EXPECT_EQ(c.server.host, "0.0.0.0");
  EXPECT_EQ(c.server.port, 9000);
  EXPECT_EQ(c.server.api_keys, (std::vector<std::string>{"k1", "k2"}));
  EXPECT_EQ(c.server.limits.max_body_bytes, 1048576);
  EXPECT_EQ(c.server.limits.max_header_bytes, 8192);
  EXPECT_EQ(c.server.limits.read_timeout_ms, 5000);
  EXPECT_EQ(c.server.limits.idle_timeout_ms, 7000);
  EXPECT_EQ(c.server.limits.request_timeout_ms, 9000);
  EXPECT_EQ(c.server.limits.shutdown_grace_ms, 2000);
  EXPECT_EQ(c.server.limits.max_connections, 100);
  EXPECT_EQ(c.server.limits.num_io_threads, 3);
  ASSERT_EQ(c.deployments.size(), 2u);
  const DeploymentConfig& d = c.deployments[0];
  EXPECT_EQ(d.name, "minilm");
  EXPECT_EQ(d.task, "embed");
  EXPECT_EQ(d.model, "/models/all-MiniLM-L6-v2");
  EXPECT_EQ(d.replicas, 2);
  EXPECT_EQ(d.precision, "bf16");
  EXPECT_FALSE(d.priority_lanes);
  EXPECT_EQ(d.timeout_ms, 1500);
  EXPECT_EQ(d.batching.max_batch_size, 64);
  EXPECT_EQ(d.batching.max_batch_tokens, 8192);
  EXPECT_TRUE(d.batching.padded_cost);
  EXPECT_EQ(d.batching.max_queue_delay_us, 2000);
  EXPECT_EQ(d.batching.queue_capacity, 500);
  EXPECT_EQ(d.batching.preferred_batch_sizes, (std::vector<int>{8, 16, 32}));
  EXPECT_EQ(d.knobs.get_int("embedding_dims", 0).value(), 256);
  EXPECT_TRUE(d.knobs.get_bool("normalize", false).value());
  EXPECT_EQ(d.knobs.get_string("pooling", "").value(), "mean");
  EXPECT_DOUBLE_EQ(d.knobs.get_double("scale", 0).value(), 0.5);
  EXPECT_EQ(d.knobs.origin("pooling"), "prism.toml:36");
  EXPECT_EQ(c.deployments[1].name, "echo");
  EXPECT_EQ(modality_of_task(d.task), "embeddings");
  // The start-up log's view: keys redacted.
  nlohmann::json j = config_to_json(c);
  EXPECT_EQ(j["server"]["api_keys"], "2 (redacted)");
  EXPECT_EQ(j["deployment"][0]["knobs"]["embedding_dims"], 256);
}

TEST(Config, EmptyFileGivesDefaults) {
  Result<Config> r = parse_config("", "prism.toml");
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ(r->server.host, "127.0.0.1");
  EXPECT_EQ(r->server.port, 8080);
  EXPECT_TRUE(r->server.api_keys.empty());
  EXPECT_GT(r->server.limits.max_body_bytes, 0);
  EXPECT_TRUE(r->deployments.empty());
}

TEST(Config, DeploymentDefaults) {
  Result<Config> r = parse_config("[[deployment]]\nname = \"e\"\ntask = \"echo\"\n", "prism.toml");
  ASSERT_TRUE(r.has_value()) << r.status().message();
  const DeploymentConfig& d = r->deployments[0];
  EXPECT_EQ(d.replicas, 1);
  EXPECT_EQ(d.precision, "f32");
  EXPECT_TRUE(d.priority_lanes);
  EXPECT_EQ(d.batching.max_batch_size, BatchPolicy{}.max_batch_size);
  EXPECT_TRUE(d.knobs.values().empty());
}

TEST(Config, SyntaxErrorNamesFileAndLine) {
  std::string m = error_of("[server]\nhost = \"x\"\nport = = 3\n");
  EXPECT_NE(m.find("prism.toml:3:"), std::string::npos) << m;
  EXPECT_NE(m.find("syntax"), std::string::npos) << m;
}

TEST(Config, UnknownKeysAreErrors) {
  expect_error("[server]\nhost = \"x\"\nprot = 8080\n", 3, "server.prot", "unknown key");
  expect_error("[server]\n[server.limits]\nmax_body = 3\n", 3, "server.limits.max_body", "unknown key");
  expect_error("serverr = 1\n", 1, "serverr", "unknown key");
  expect_error(R"([[deployment]]
name = "a"
task = "echo"
[deployment.batching]
max_batch_sise = 3
)",
               5, "deployment[0].batching.max_batch_sise", "max_batch_size");  // lists the known keys
  expect_error("[[deployment]]\nname = \"a\"\ntask = \"echo\"\nreplica = 2\n", 4, "deployment[0].replica");
}

TEST(Config, WrongTypes) {
  expect_error("[server]\nport = \"8080\"\n", 2, "server.port", "expected an integer, got a string");
  expect_error("[server]\n\nhost = 5\n", 3, "server.host", "expected a string");
  expect_error("[server]\napi_keys = [\"a\", 3]\n", 2, "server.api_keys", "array of strings");
  expect_error("[server]\napi_keys = \"a\"\n", 2, "server.api_keys", "array of strings");
  expect_error("[server]\nlimits = 3\n", 2, "server.limits", "expected a table");
  expect_error("[server.limits]\nread_timeout_ms = 1.5\n", 2, "server.limits.read_timeout_ms",
               "got a floating-point number");
  expect_error("[[deployment]]\nname = \"a\"\ntask = \"echo\"\npriority_lanes = 1\n", 4,
               "deployment[0].priority_lanes", "boolean");
  expect_error("[[deployment]]\nname = \"a\"\ntask = \"echo\"\n[deployment.batching]\npreferred_batch_sizes = [1, \"2\"]\n",
               5, "deployment[0].batching.preferred_batch_sizes", "array of integers");
  expect_error("[[deployment]]\nname = \"a\"\ntask = \"echo\"\n[deployment.knobs]\nlist = [1, 2]\n", 5,
               "deployment[0].knobs.list", "knob values");
  expect_error("deployment = 3\n", 1, "deployment", "[[deployment]]");
}

TEST(Config, OutOfRange) {
  expect_error("[server]\nport = 70000\n", 2, "server.port", "0..65535");
  expect_error("[server]\nport = 99999999999\n", 2, "server.port");
  expect_error("[server.limits]\n\nnum_io_threads = 0\n", 3, "server.limits.num_io_threads");
  expect_error("[server.limits]\nmax_body_bytes = -1\n", 2, "server.limits.max_body_bytes");
  expect_error(R"([[deployment]]
name = "a"
task = "echo"
replicas = 0
)",
               4, "deployment[0].replicas", "1..64");
  expect_error(R"([[deployment]]
name = "a"
task = "echo"

[deployment.batching]
max_batch_size = 8
max_batch_tokens = 0
)",
               7, "deployment[0].batching.max_batch_tokens");
  expect_error(R"([[deployment]]
name = "a"
task = "echo"
[deployment.batching]
max_batch_size = 8
preferred_batch_sizes = [4, 16]
)",
               6, "deployment[0].batching.preferred_batch_sizes", "1..8");
  expect_error(R"([[deployment]]
name = "a"
task = "echo"
[deployment.batching]
preferred_batch_sizes = [4, 2]
)",
               5, "deployment[0].batching.preferred_batch_sizes", "increasing");
  expect_error("[[deployment]]\nname = \"a\"\ntask = \"echo\"\nprecision = \"fp16\"\n", 4,
               "deployment[0].precision", "f32, bf16, int8");
  expect_error("[[deployment]]\nname = \"a\"\ntask = \"embedd\"\n", 3, "deployment[0].task", "unknown task");
}

TEST(Config, MissingRequiredKeysPointAtTheTable) {
  // No name: reported at the [[deployment]] header (line 4).
  expect_error("[server]\nport = 1\n\n[[deployment]]\ntask = \"echo\"\n", 4, "deployment[0].name", "required");
  expect_error("[[deployment]]\nname = \"m\"\ntask = \"embed\"\n", 1, "deployment[0].model", "required");
}

TEST(Config, DuplicateDeploymentNames) {
  std::string text = R"([[deployment]]
name = "m"
task = "echo"

[[deployment]]
name = "m"
task = "echo"
)";
  expect_error(text, 6, "deployment[1].name", "duplicate deployment name 'm'");
  EXPECT_NE(error_of(text).find("prism.toml:2"), std::string::npos) << error_of(text);  // the first one
}

TEST(Config, LoadConfigMissingFile) {
  Result<Config> r = load_config("/nonexistent/prism.toml");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), StatusCode::not_found);
  EXPECT_NE(r.status().message().find("/nonexistent/prism.toml"), std::string::npos);
}

TEST(Config, OverridesReplaceAndValidate) {
  Result<Config> r = parse_config("[server]\nport = 9000\napi_keys = [\"file\"]\n", "prism.toml");
  ASSERT_TRUE(r.has_value());
  Config c = *r;
  ConfigOverrides o;
  o.host = "0.0.0.0";
  o.port = 9100;
  o.api_keys = {"cli"};
  o.models.push_back({"embed", "/models/all-MiniLM-L6-v2/", "--embed"});
  ASSERT_TRUE(apply_overrides(c, o).ok());
  EXPECT_EQ(c.server.host, "0.0.0.0");
  EXPECT_EQ(c.server.port, 9100);
  EXPECT_EQ(c.server.api_keys, std::vector<std::string>{"cli"});
  ASSERT_EQ(c.deployments.size(), 1u);
  EXPECT_EQ(c.deployments[0].name, "all-MiniLM-L6-v2");
  EXPECT_EQ(c.deployments[0].task, "embed");
  EXPECT_EQ(c.deployments[0].model, "/models/all-MiniLM-L6-v2/");
}

TEST(Config, OverrideErrorsNameTheFlag) {
  Config c;
  ConfigOverrides o;
  o.port = 70000;
  Status s = apply_overrides(c, o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--port"), std::string::npos) << s.message();

  Config c2;
  ConfigOverrides o2;
  o2.host = "bad host";
  s = apply_overrides(c2, o2);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--host"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'server.host'"), std::string::npos) << s.message();

  // A single-model flag that collides with the file's deployment names both origins.
  Result<Config> r = parse_config("[[deployment]]\nname = \"minilm\"\ntask = \"echo\"\n", "prism.toml");
  ASSERT_TRUE(r.has_value());
  Config c3 = *r;
  ConfigOverrides o3;
  o3.models.push_back({"embed", "/m/minilm", "--embed"});
  s = apply_overrides(c3, o3);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--embed /m/minilm"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("prism.toml:2"), std::string::npos) << s.message();
}

TEST(Config, KnobGettersCheckTypes) {
  Knobs k;
  k.set("n", int64_t{3}, "f.toml:7");
  k.set("s", std::string("x"));
  EXPECT_EQ(k.get_int("missing", 11).value(), 11);
  EXPECT_DOUBLE_EQ(k.get_double("n", 0).value(), 3.0);  // integers serve as doubles
  Result<std::string> bad = k.get_string("n", "");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("f.toml:7"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("'n'"), std::string::npos);
  EXPECT_FALSE(k.get_bool("s", false).has_value());
}

TEST(Config, StrictFromTheFileOrTheFlag) {
  Result<Config> off = parse_config("", "prism.toml");
  ASSERT_TRUE(off.has_value());
  EXPECT_FALSE(off->server.strict);  // a failed deployment is left out by default
  EXPECT_EQ(config_to_json(*off)["server"]["strict"], false);

  Result<Config> on = parse_config("[server]\nstrict = true\n", "prism.toml");
  ASSERT_TRUE(on.has_value()) << on.status().message();
  EXPECT_TRUE(on->server.strict);
  EXPECT_EQ(config_to_json(*on)["server"]["strict"], true);
  expect_error("[server]\nstrict = \"yes\"\n", 2, "server.strict", "expected a boolean");

  // --strict sets it; without the flag the file's value stands.
  Config c = *off;
  ConfigOverrides o;
  o.strict = true;
  ASSERT_TRUE(apply_overrides(c, o).ok());
  EXPECT_TRUE(c.server.strict);
  EXPECT_EQ(c.origin_of("server.strict"), "--strict");
  Config kept = *on;
  ASSERT_TRUE(apply_overrides(kept, ConfigOverrides{}).ok());
  EXPECT_TRUE(kept.server.strict);
}

}  // namespace
}  // namespace prism::serving

namespace prism::serving {
namespace {

TEST(Config, ComputeWaitAndGate) {
  Result<Config> unset = parse_config("", "prism.toml");
  ASSERT_TRUE(unset.has_value());
  EXPECT_EQ(unset->server.compute_wait, "");  // PRISM_COMPUTE_WAIT, else Prism's default
  EXPECT_TRUE(unset->server.compute_gate);    // deployments take turns on the pool
  EXPECT_EQ(config_to_json(*unset)["server"]["compute_wait"], "unset");
  EXPECT_EQ(config_to_json(*unset)["server"]["compute_gate"], true);

  for (const char* wait : {"passive", "short_spin", "spin"}) {
    Result<Config> c = parse_config(std::string("[server]\ncompute_wait = \"") + wait + "\"\ncompute_gate = false\n",
                                    "prism.toml");
    ASSERT_TRUE(c.has_value()) << c.status().message();
    EXPECT_EQ(c->server.compute_wait, wait);
    EXPECT_FALSE(c->server.compute_gate);
    EXPECT_EQ(config_to_json(*c)["server"]["compute_wait"], wait);
  }

  expect_error("[server]\ncompute_wait = \"active\"\n", 2, "server.compute_wait",
               "must be one of \"passive\", \"short_spin\", \"spin\", got 'active'");
  expect_error("[server]\n\ncompute_wait = \"PASSIVE\"\n", 3, "server.compute_wait", "got 'PASSIVE'");
  expect_error("[server]\ncompute_wait = 1\n", 2, "server.compute_wait", "expected a string");
  expect_error("[server]\ncompute_gate = \"on\"\n", 2, "server.compute_gate", "expected a boolean");
}

TEST(Config, MaxWaitMsIsTheQueueDelayInMilliseconds) {
  Result<Config> c = parse_config("[[deployment]]\nname = \"e\"\ntask = \"echo\"\n[deployment.batching]\nmax_wait_ms = 5\n",
                                  "prism.toml");
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->deployments[0].batching.max_queue_delay_us, 5000);
  Result<Config> both = parse_config(
      "[[deployment]]\nname = \"e\"\ntask = \"echo\"\n[deployment.batching]\nmax_wait_ms = 5\nmax_queue_delay_us = 1\n",
      "prism.toml");
  ASSERT_FALSE(both.has_value());
  EXPECT_NE(both.status().message().find("not both"), std::string::npos) << both.status().message();
  Result<Config> negative =
      parse_config("[[deployment]]\nname = \"e\"\ntask = \"echo\"\n[deployment.batching]\nmax_wait_ms = -3\n", "prism.toml");
  ASSERT_FALSE(negative.has_value());
}

TEST(Config, MediaCacheTableAndFlags) {
  Result<Config> r = parse_config("[server.media_cache]\nmax_bytes = 1048576\ndir = \"/tmp/media\"\n", "prism.toml");
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ(r->server.media_cache.max_bytes, 1048576);
  EXPECT_EQ(r->server.media_cache.dir, "/tmp/media");
  EXPECT_EQ(r->server.media_cache.max_disk_bytes, 4ll << 30);

  Result<Config> bad = parse_config("[server.media_cache]\nmax_bytes = -1\n", "prism.toml");
  ASSERT_FALSE(bad.has_value());
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("prism.toml:2: key 'server.media_cache.max_bytes'"));
  Result<Config> unknown = parse_config("[server.media_cache]\nbytes = 1\n", "prism.toml");
  ASSERT_FALSE(unknown.has_value());
  EXPECT_THAT(unknown.status().message(), ::testing::HasSubstr("server.media_cache.bytes"));

  Config c = *r;
  ConfigOverrides o;
  o.media_cache_bytes = 0;
  o.media_cache_dir = "/srv/cache";
  ASSERT_TRUE(apply_overrides(c, o).ok());
  EXPECT_EQ(c.server.media_cache.max_bytes, 0);
  EXPECT_EQ(c.server.media_cache.dir, "/srv/cache");
}

}  // namespace
}  // namespace prism::serving
