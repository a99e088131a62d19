#include "store/s3_request.h"

#include <charconv>

namespace dcr::s3 {
namespace {

bool ParseU64(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool ValidBucketName(const std::string& b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-')) return false;
  }
  auto alnum = [](char c) { return c != '.' && c != '-'; };
  return alnum(b.front()) && alnum(b.back());
}

}  // namespace

Result<Endpoint> ParseEndpoint(const std::string& endpoint, const std::string& region, bool virtual_host_style) {
  Endpoint ep;
  ep.virtual_host_style = virtual_host_style;
  if (endpoint.empty()) {
    ep.scheme = "https";
    ep.host = "s3." + region + ".amazonaws.com";
    return ep;
  }
  auto bad = [&](const char* why) { return InvalidArgument("S3 endpoint \"" + endpoint + "\": " + why); };
  size_t sep = endpoint.find("://");
  if (sep == std::string::npos) return bad("expected http://HOST[:PORT] or https://HOST[:PORT]");
  ep.scheme = endpoint.substr(0, sep);
  if (ep.scheme != "http" && ep.scheme != "https") return bad("the scheme must be http or https");
  std::string rest = endpoint.substr(sep + 3);
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.empty()) return bad("no host");
  if (rest.find_first_of("/?#@ ") != std::string::npos) return bad("only a scheme, a host and a port are allowed");
  const std::string default_port = ep.scheme == "http" ? ":80" : ":443";
  if (rest.size() > default_port.size() && rest.ends_with(default_port)) rest.resize(rest.size() - default_port.size());
  ep.host = rest;
  return ep;
}

Status ParseS3Url(const std::string& url, std::string* bucket, std::string* prefix) {
  const std::string scheme = "s3://";
  if (!url.starts_with(scheme)) return InvalidArgument("store URL \"" + url + "\": expected s3://BUCKET[/PREFIX]");
  std::string rest = url.substr(scheme.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  size_t slash = rest.find('/');
  *bucket = rest.substr(0, slash);
  *prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (!ValidBucketName(*bucket)) {
    return InvalidArgument("store URL \"" + url + "\": \"" + *bucket +
                           "\" is not a valid S3 bucket name (3-63 of a-z 0-9 . -, starting and ending alphanumeric)");
  }
  if (!prefix->empty()) {
    Status s = CheckObjectKey(*prefix);
    if (!s.ok()) return InvalidArgument("store URL \"" + url + "\": prefix: " + s.message());
  }
  return Status::Ok();
}

SignedRequest SignRequest(const Endpoint& endpoint, const Request& request, const sigv4::Credentials& credentials,
                          const std::string& region, const std::string& amz_date) {
  std::string host = endpoint.host, path;
  if (endpoint.virtual_host_style) {
    host = request.bucket + "." + endpoint.host;
    path = "/" + sigv4::UriEncode(request.object, true);
  } else {
    path = "/" + request.bucket;
    if (!request.object.empty()) path += "/" + sigv4::UriEncode(request.object, true);
  }
  sigv4::Request req;
  req.method = request.method;
  req.path = path;
  req.query = request.query;
  req.payload_hash = request.payload_hash;
  req.headers = {{"Host", host}, {"X-Amz-Date", amz_date}, {"X-Amz-Content-SHA256", request.payload_hash}};
  if (!credentials.session_token.empty()) req.headers.emplace_back("X-Amz-Security-Token", credentials.session_token);
  req.headers.insert(req.headers.end(), request.headers.begin(), request.headers.end());

  SignedRequest out;
  out.signature = sigv4::Sign(req, credentials, {region, "s3", amz_date}, sigv4::UriRule::kS3);
  const std::string query = sigv4::CanonicalQueryString(request.query);
  out.url = endpoint.scheme + "://" + host + path + (query.empty() ? "" : "?" + query);
  out.headers = std::move(req.headers);
  out.headers.emplace_back("Authorization", out.signature.authorization);
  return out;
}

std::optional<std::string> XmlDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '&') {
      out += text[i];
      continue;
    }
    size_t semi = text.find(';', i);
    if (semi == std::string_view::npos) return std::nullopt;
    std::string_view ent = text.substr(i + 1, semi - i - 1);
    if (ent == "amp")
      out += '&';
    else if (ent == "lt")
      out += '<';
    else if (ent == "gt")
      out += '>';
    else if (ent == "quot")
      out += '"';
    else if (ent == "apos")
      out += '\'';
    else if (ent.size() >= 2 && ent[0] == '#') {
      bool hex = ent[1] == 'x' || ent[1] == 'X';
      std::string_view digits = ent.substr(hex ? 2 : 1);
      uint32_t cp = 0;
      auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), cp, hex ? 16 : 10);
      if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || cp > 0x10FFFF)
        return std::nullopt;
      AppendUtf8(cp, &out);
    } else {
      return std::nullopt;
    }
    i = semi;
  }
  return out;
}

std::optional<std::string> XmlText(std::string_view xml, std::string_view element, size_t* pos) {
  size_t at = pos ? *pos : 0;
  const std::string open = "<" + std::string(element);
  const std::string close = "</" + std::string(element) + ">";
  for (;;) {
    at = xml.find(open, at);
    if (at == std::string_view::npos) return std::nullopt;
    size_t after = at + open.size();
    if (after >= xml.size()) return std::nullopt;
    char c = xml[after];
    if (c == '>' || c == ' ' || c == '/') break;
    at = after;  // a longer name with the same start, e.g. <KeyCount> for <Key>
  }
  size_t gt = xml.find('>', at);
  if (gt == std::string_view::npos) return std::nullopt;
  if (xml[gt - 1] == '/') {  // <Element/>
    if (pos) *pos = gt + 1;
    return std::string();
  }
  size_t end = xml.find(close, gt + 1);
  if (end == std::string_view::npos) return std::nullopt;
  if (pos) *pos = end + close.size();
  return XmlDecode(xml.substr(gt + 1, end - gt - 1));
}

std::string ErrorSummary(std::string_view body) {
  if (body.find("<Error") == std::string_view::npos) return "";
  std::string code = XmlText(body, "Code").value_or("");
  std::string message = XmlText(body, "Message").value_or("");
  return code + (message.empty() ? "" : ": " + message);
}

Result<ListPage> ParseListPage(std::string_view xml) {
  if (xml.find("<ListBucketResult") == std::string_view::npos) {
    return Corrupt("ListObjectsV2 response is not a ListBucketResult: " + std::string(xml.substr(0, 200)));
  }
  ListPage page;
  size_t pos = 0;
  for (;;) {
    size_t open = xml.find("<Contents>", pos);
    if (open == std::string_view::npos) break;
    size_t close = xml.find("</Contents>", open);
    if (close == std::string_view::npos) return Corrupt("ListObjectsV2 response: unterminated <Contents>");
    std::string_view entry = xml.substr(open, close - open);
    auto key = XmlText(entry, "Key");
    auto size = XmlText(entry, "Size");
    ObjectInfo info;
    if (!key || key->empty() || !size || !ParseU64(*size, &info.size)) {
      return Corrupt("ListObjectsV2 response: a <Contents> without a valid Key and Size: " +
                     std::string(entry.substr(0, 200)));
    }
    info.key = std::move(*key);
    page.objects.push_back(std::move(info));
    pos = close;
  }
  auto truncated = XmlText(xml, "IsTruncated");
  page.truncated = truncated && *truncated == "true";
  if (page.truncated) {
    auto token = XmlText(xml, "NextContinuationToken");
    if (!token || token->empty()) return Corrupt("ListObjectsV2 response: truncated without a NextContinuationToken");
    page.next_continuation_token = std::move(*token);
  }
  return page;
}

bool ParseContentRange(std::string_view value, uint64_t* first, uint64_t* last, uint64_t* total) {
  if (!value.starts_with("bytes ")) return false;
  value.remove_prefix(6);
  size_t dash = value.find('-'), slash = value.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || dash > slash) return false;
  return ParseU64(value.substr(0, dash), first) && ParseU64(value.substr(dash + 1, slash - dash - 1), last) &&
         ParseU64(value.substr(slash + 1), total) && *first <= *last && *last < *total;
}

}  // namespace dcr::s3
