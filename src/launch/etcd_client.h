// A client of etcd's v3 API through its JSON gateway (POST /v3/kv/range,
// /v3/lease/grant, ...): the coordination service the elastic launcher keeps
// its membership and its leader in. etcd is Debian's etcd-server; this speaks
// only the handful of calls the launcher needs, over plain HTTP to one
// endpoint. Keys and values are byte strings (base64 on the wire).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"

namespace scaletrain {

class EtcdClient {
 public:
  // url: http://HOST:PORT. Fails (naming the URL and how to start etcd) when
  // nothing answers there within a few seconds.
  static Result<EtcdClient> Connect(const std::string& url);

  // A lease of ttl_s seconds; keys put under it vanish when it expires.
  Result<int64_t> GrantLease(int64_t ttl_s);
  // Renews the lease; the seconds it has left, 0 when it had already expired.
  Result<int64_t> KeepAlive(int64_t lease);
  Status Put(const std::string& key, const std::string& value, int64_t lease = 0);
  // Puts only when the key does not exist; true when this call created it.
  Result<bool> PutIfAbsent(const std::string& key, const std::string& value, int64_t lease);
  Result<std::optional<std::string>> Get(const std::string& key);
  // Every key starting with prefix, with its value, in key order.
  Result<std::map<std::string, std::string>> GetPrefix(const std::string& prefix);
  Status Delete(const std::string& key);

  const std::string& url() const { return url_; }

 private:
  EtcdClient(std::string url, std::string host, int port)
      : url_(std::move(url)), host_(std::move(host)), port_(port) {}
  Result<std::string> Post(const std::string& path, const std::string& body);

  std::string url_, host_;
  int port_ = 0;
};

// RFC 4648 base64, as etcd's gateway carries keys and values.
std::string Base64Encode(const std::string& bytes);
Result<std::string> Base64Decode(const std::string& text);

}  // namespace scaletrain
