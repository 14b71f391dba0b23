#include "launch/etcd_client.h"

#include <httplib.h>

#include <chrono>
#include <cstring>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/strings.h"

namespace scaletrain {
namespace {

using nlohmann::json;

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The gateway writes int64 fields as JSON strings ("TTL": "5"); absent means 0.
int64_t Int64Field(const json& j, const char* name) {
  if (!j.contains(name)) return 0;
  const json& v = j[name];
  if (v.is_string()) return std::stoll(v.get<std::string>());
  return v.get<int64_t>();
}

// The first key after every key starting with prefix: etcd's range_end.
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<unsigned char>(prefix.back()) < 0xff) {
      prefix.back() = static_cast<char>(prefix.back() + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

}  // namespace

std::string Base64Encode(const std::string& bytes) {
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) |
                       (static_cast<uint8_t>(bytes[i + 1]) << 8) | static_cast<uint8_t>(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (rest == 2) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

Result<std::string> Base64Decode(const std::string& text) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    const char* p = std::strchr(kAlphabet, c);
    if (c == '\0' || p == nullptr) return DataLoss("etcd sent a value that is not base64");
    acc = (acc << 6) | static_cast<uint32_t>(p - kAlphabet);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

Result<EtcdClient> EtcdClient::Connect(const std::string& url) {
  const std::string scheme = "http://";
  const size_t colon = url.rfind(':');
  if (url.rfind(scheme, 0) != 0 || colon == std::string::npos || colon < scheme.size()) {
    return InvalidArgument("--etcd '" + url + "' is not an http://HOST:PORT address (e.g. http://127.0.0.1:2379)");
  }
  const std::string host = url.substr(scheme.size(), colon - scheme.size());
  int port = 0;
  try {
    port = std::stoi(url.substr(colon + 1));
  } catch (...) {
  }
  if (host.empty() || port <= 0 || port > 65535) {
    return InvalidArgument("--etcd '" + url + "' has no valid HOST:PORT (e.g. http://127.0.0.1:2379)");
  }
  EtcdClient client(url, host, port);
  httplib::Client http(host, port);
  http.set_connection_timeout(3, 0);
  http.set_read_timeout(3, 0);
  // An etcd started a moment ago (by the same script) may not listen yet.
  auto res = http.Get("/version");
  for (int retry = 0; !res && retry < 10; ++retry) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    res = http.Get("/version");
  }
  if (!res || res->status != 200 || res->body.find("etcdserver") == std::string::npos) {
    return FailedPrecondition("no etcd answers at " + url +
                              " (start one, e.g. `etcd --listen-client-urls " + url +
                              " --advertise-client-urls " + url +
                              "` from Debian's etcd-server, or fix --etcd)");
  }
  return client;
}

Result<std::string> EtcdClient::Post(const std::string& path, const std::string& body) {
  httplib::Client http(host_, port_);
  http.set_connection_timeout(2, 0);
  http.set_read_timeout(3, 0);
  auto res = http.Post(path, body, "application/json");
  if (!res) {
    return IoError("etcd at " + url_ + " did not answer " + path + " (" + httplib::to_string(res.error()) + ")");
  }
  if (res->status != 200) {
    return IoError(Fmt("etcd at %s answered %s with HTTP %d: %s", url_.c_str(), path.c_str(),
                       res->status, res->body.substr(0, 200).c_str()));
  }
  return res->body;
}

Result<int64_t> EtcdClient::GrantLease(int64_t ttl_s) {
  auto body = Post("/v3/lease/grant", json{{"TTL", std::to_string(ttl_s)}}.dump());
  if (!body.ok()) return body.status();
  const json j = json::parse(*body, nullptr, false);
  const int64_t id = j.is_object() ? Int64Field(j, "ID") : 0;
  if (id == 0) return IoError("etcd at " + url_ + " granted no lease: " + body->substr(0, 200));
  return id;
}

Result<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  auto body = Post("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump());
  if (!body.ok()) return body.status();
  const json j = json::parse(*body, nullptr, false);
  if (!j.is_object() || !j.contains("result")) return int64_t{0};
  return Int64Field(j["result"], "TTL");
}

Status EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  json req{{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) req["lease"] = std::to_string(lease);
  return Post("/v3/kv/put", req.dump()).status();
}

Result<bool> EtcdClient::PutIfAbsent(const std::string& key, const std::string& value, int64_t lease) {
  json put{{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  const json req{
      {"compare", json::array({json{{"target", "CREATE"}, {"key", Base64Encode(key)}, {"create_revision", "0"}}})},
      {"success", json::array({json{{"request_put", put}}})}};
  auto body = Post("/v3/kv/txn", req.dump());
  if (!body.ok()) return body.status();
  const json j = json::parse(*body, nullptr, false);
  return j.is_object() && j.value("succeeded", false);
}

Result<std::map<std::string, std::string>> EtcdClient::GetPrefix(const std::string& prefix) {
  auto body = Post("/v3/kv/range",
                   json{{"key", Base64Encode(prefix)}, {"range_end", Base64Encode(PrefixEnd(prefix))}}.dump());
  if (!body.ok()) return body.status();
  const json j = json::parse(*body, nullptr, false);
  if (!j.is_object()) return DataLoss("etcd at " + url_ + " sent a range answer that is not JSON");
  std::map<std::string, std::string> kvs;
  for (const json& kv : j.value("kvs", json::array())) {
    auto k = Base64Decode(kv.value("key", ""));
    auto v = Base64Decode(kv.value("value", ""));
    if (!k.ok()) return k.status();
    if (!v.ok()) return v.status();
    kvs[*k] = *v;
  }
  return kvs;
}

Result<std::optional<std::string>> EtcdClient::Get(const std::string& key) {
  auto kvs = GetPrefix(key);
  if (!kvs.ok()) return kvs.status();
  auto it = kvs->find(key);
  if (it == kvs->end()) return std::optional<std::string>();
  return std::optional<std::string>(it->second);
}

Status EtcdClient::Delete(const std::string& key) {
  return Post("/v3/kv/deleterange", json{{"key", Base64Encode(key)}}.dump()).status();
}

}  // namespace scaletrain
