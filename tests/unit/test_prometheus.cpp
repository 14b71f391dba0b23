// The Prometheus exposition text and the /metrics server (telemetry/prometheus.h):
// the format a scraper parses, label escaping, the server answering a GET on
// loopback, and a taken port as one clear error.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <sstream>

#include "telemetry/prometheus.h"

namespace scaletrain {
namespace {

PrometheusSnapshot Snap() {
  PrometheusSnapshot s;
  s.step = 12;
  s.step_seconds = 0.25;
  s.tokens_per_second = 4096;
  s.loss = 2.5;
  s.grad_norm = 0.75;
  s.dp_exposed_s = 0.01;
  s.ranks.push_back({0, "node-a", 0.24, 1000, false});
  s.ranks.push_back({1, "we\"ird\\host", 0.31, 2000, true});
  return s;
}

// Whether `line` is a sample of the exposition format: a metric name, an
// optional {label="value",...} set (quotes and backslashes escaped inside
// values), a space, a number. (Hand-written: std::regex trips GCC 12's
// maybe-uninitialized warning under the sanitizer build.)
bool IsSample(const std::string& line) {
  size_t i = 0;
  while (i < line.size() && (std::islower(static_cast<unsigned char>(line[i])) || line[i] == '_')) ++i;
  if (i == 0) return false;
  if (i < line.size() && line[i] == '{') {
    ++i;
    for (bool first = true;; first = false) {
      if (i >= line.size()) return false;
      if (!first) {
        if (line[i] == '}') break;
        if (line[i++] != ',') return false;
      }
      const size_t name = i;
      while (i < line.size() && std::islower(static_cast<unsigned char>(line[i]))) ++i;
      if (i == name || line.compare(i, 2, "=\"") != 0) return false;
      for (i += 2; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] == '\\') ++i;
      }
      if (i++ >= line.size()) return false;
    }
    ++i;
  }
  if (i >= line.size() || line[i++] != ' ' || i >= line.size()) return false;
  char* end = nullptr;
  std::strtod(line.c_str() + i, &end);
  return *end == '\0';
}

TEST(PrometheusText, EverySampleLineIsNameLabelsValueAndEveryFamilyHasHelpAndType) {
  const std::string text = PrometheusText(Snap());
  std::istringstream in(text);
  std::string line;
  int samples = 0, types = 0;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) ++types;
    if (line[0] == '#') continue;
    EXPECT_TRUE(IsSample(line)) << line;
    ++samples;
  }
  // step, step_seconds, tokens/s, loss, grad_norm, 3 comm groups, 2 ranks x 3 families
  EXPECT_EQ(samples, 14);
  EXPECT_EQ(types, 9);  // no scaletrain_mfu without a peak
  EXPECT_NE(text.find("scaletrain_step 12\n"), std::string::npos);
  EXPECT_NE(text.find("scaletrain_step_seconds 0.25\n"), std::string::npos);
  EXPECT_NE(text.find("scaletrain_rank_step_seconds{rank=\"1\",host=\"we\\\"ird\\\\host\"} 0.31"), std::string::npos);
  EXPECT_NE(text.find("scaletrain_straggler{rank=\"1\",host=\"we\\\"ird\\\\host\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("scaletrain_straggler{rank=\"0\",host=\"node-a\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("scaletrain_memory_bytes{rank=\"1\"} 2000\n"), std::string::npos);
  EXPECT_EQ(text.find("scaletrain_mfu"), std::string::npos);
}

TEST(PrometheusText, MfuAppearsWhenKnown) {
  PrometheusSnapshot s = Snap();
  s.mfu = 0.4;
  EXPECT_NE(PrometheusText(s).find("# TYPE scaletrain_mfu gauge\nscaletrain_mfu 0.40000000000000002\n"),
            std::string::npos);
}

// A socket bound and listening on 127.0.0.1 at a port the kernel picks.
int ListenOnFreePort(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 1) != 0) return -1;
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

std::string Get(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) reply.append(buf, static_cast<size_t>(n));
  close(fd);
  return reply;
}

TEST(MetricsServer, ServesTheNewestSnapshotOnLoopback) {
  int port = 0;
  const int holder = ListenOnFreePort(&port);
  ASSERT_GE(holder, 0);
  close(holder);  // free again: the server takes it
  auto server = MetricsServer::Start("127.0.0.1", port);
  ASSERT_TRUE(server.ok()) << server.status().message();
  (*server)->Update(Snap());
  PrometheusSnapshot later = Snap();
  later.step = 13;
  (*server)->Update(later);
  const std::string reply = Get(port, "/metrics");
  EXPECT_NE(reply.find("200 OK"), std::string::npos) << reply;
  EXPECT_NE(reply.find("text/plain; version=0.0.4"), std::string::npos) << reply;
  EXPECT_NE(reply.find("\r\n\r\n"), std::string::npos);
  EXPECT_NE(reply.find("scaletrain_step 13\n"), std::string::npos) << reply;
  EXPECT_NE(Get(port, "/other").find("404"), std::string::npos);
}

TEST(MetricsServer, ATakenPortIsOneErrorNamingItAndTheFix) {
  int port = 0;
  const int holder = ListenOnFreePort(&port);
  ASSERT_GE(holder, 0);
  auto server = MetricsServer::Start("127.0.0.1", port);
  close(holder);
  ASSERT_FALSE(server.ok());
  const std::string msg = server.status().message();
  EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << msg;
  EXPECT_NE(msg.find("port is taken"), std::string::npos) << msg;
  EXPECT_NE(msg.find("telemetry.metrics_port"), std::string::npos) << msg;
}

}  // namespace
}  // namespace scaletrain
