"""The web client's hosting: a private S3 bucket behind CloudFront, with the API under `/api/*` of one origin.

The bucket is never public: CloudFront reads it through Origin Access Control, and the bucket policy allows
that one distribution only (ListBucket too, so a missing file is S3's 404, not a 403). The default behaviour
serves the client compressed, caching each object as its Cache-Control says (scripts/deploy-client: a year
for the versioned assets, revalidation for index.html and sw.js). `/api/*` goes to API Gateway uncached,
every method, with the viewer's headers (Authorization included: allowed with caching disabled) and query
strings. Both carry the security headers of chalicelib/hosting.py.

CORS for other origins (AllowedOrigins) is answered by API Gateway for preflights (an OPTIONS mock per route,
rendered from chalicelib/api/cors.py) and by the API function for the requests themselves.
"""
from __future__ import annotations

from typing import Any

from chalicelib import hosting
from chalicelib.api import cors

Resource = dict[str, Any]
BUCKET = "ClientBucket"
BUCKET_POLICY = "ClientBucketPolicy"
OAC = "ClientOriginAccessControl"
CACHE_POLICY = "ClientCachePolicy"
HEADERS_POLICY = "SecurityHeadersPolicy"
DISTRIBUTION = "ClientDistribution"
ALLOWED_ORIGINS = "AllowedOrigins"
# AWS managed policies (CloudFront's documented ids).
CACHING_DISABLED = "4135ea2d-6df8-44a3-9df3-4b5a84be39ad"
ALL_VIEWER_EXCEPT_HOST = "b689b0a8-53d0-40ab-baf2-68738e2966ac"  # API Gateway must see its own Host
API_PATH = "/api/*"
ONE_YEAR = 31_536_000


def parameters() -> dict[str, Any]:
    return {ALLOWED_ORIGINS: {
        "Type": "CommaDelimitedList", "Default": "",
        "Description": "Other web origins allowed to call the API (CORS), e.g. https://portal.example.com; "
                       "empty: none (the client is served from the API's own origin)"}}


def resources(name: str, api: str, stage: str) -> dict[str, Resource]:
    """`name` prefixes the policies' names (unique per account); `api` is the RestAPI's logical id and
    `stage` its API Gateway stage (the origin path)."""
    return {
        BUCKET: _bucket(),
        BUCKET_POLICY: _bucket_policy(),
        OAC: {"Type": "AWS::CloudFront::OriginAccessControl", "Properties": {"OriginAccessControlConfig": {
            "Name": f"{name}-client", "OriginAccessControlOriginType": "s3",
            "SigningBehavior": "always", "SigningProtocol": "sigv4"}}},
        CACHE_POLICY: _cache_policy(f"{name}-client"),
        HEADERS_POLICY: headers_policy(f"{name}-security-headers"),
        DISTRIBUTION: _distribution(api, stage),
    }


def _bucket() -> Resource:
    return {"Type": "AWS::S3::Bucket", "DeletionPolicy": "Delete", "UpdateReplacePolicy": "Delete",
            "Properties": {
                "PublicAccessBlockConfiguration": {"BlockPublicAcls": True, "BlockPublicPolicy": True,
                                                   "IgnorePublicAcls": True, "RestrictPublicBuckets": True},
                "OwnershipControls": {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]},
                "BucketEncryption": {"ServerSideEncryptionConfiguration": [
                    {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]}}}


def _bucket_policy() -> Resource:
    distribution = {"Fn::Sub": "arn:${AWS::Partition}:cloudfront::${AWS::AccountId}:distribution/"
                               f"${{{DISTRIBUTION}}}"}
    bucket = {"Fn::GetAtt": [BUCKET, "Arn"]}
    return {"Type": "AWS::S3::BucketPolicy", "Properties": {"Bucket": {"Ref": BUCKET}, "PolicyDocument": {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "DistributionReadsTheClient", "Effect": "Allow",
             "Principal": {"Service": "cloudfront.amazonaws.com"},
             "Action": ["s3:GetObject", "s3:ListBucket"],
             "Resource": [bucket, {"Fn::Sub": f"${{{BUCKET}.Arn}}/*"}],
             "Condition": {"StringEquals": {"AWS:SourceArn": distribution}}},
            {"Sid": "TlsOnly", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
             "Resource": [bucket, {"Fn::Sub": f"${{{BUCKET}.Arn}}/*"}],
             "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
        ]}}}


def _cache_policy(name: str) -> Resource:
    """Objects cached as their own Cache-Control says (MinTTL 0: `no-cache` revalidates), gzip/brotli keyed."""
    return {"Type": "AWS::CloudFront::CachePolicy", "Properties": {"CachePolicyConfig": {
        "Name": name, "MinTTL": 0, "DefaultTTL": 0, "MaxTTL": ONE_YEAR,
        "ParametersInCacheKeyAndForwardedToOrigin": {
            "EnableAcceptEncodingGzip": True, "EnableAcceptEncodingBrotli": True,
            "HeadersConfig": {"HeaderBehavior": "none"}, "CookiesConfig": {"CookieBehavior": "none"},
            "QueryStringsConfig": {"QueryStringBehavior": "none"}}}}}


def headers_policy(name: str) -> Resource:
    """chalicelib/hosting.py's SECURITY_HEADERS as CloudFront's response headers policy (overriding origins)."""
    return {"Type": "AWS::CloudFront::ResponseHeadersPolicy", "Properties": {"ResponseHeadersPolicyConfig": {
        "Name": name,
        "SecurityHeadersConfig": {
            "ContentSecurityPolicy": {"ContentSecurityPolicy": {"Fn::Sub": hosting.CSP_AWS}, "Override": True},
            "ContentTypeOptions": {"Override": True},
            "FrameOptions": {"FrameOption": hosting.FRAME_OPTION, "Override": True},
            "ReferrerPolicy": {"ReferrerPolicy": hosting.REFERRER_POLICY, "Override": True},
            "StrictTransportSecurity": {"AccessControlMaxAgeSec": hosting.HSTS_MAX_AGE,
                                        "IncludeSubdomains": True, "Override": True}}}}}


def _distribution(api: str, stage: str) -> Resource:
    headers = {"Ref": HEADERS_POLICY}
    return {"Type": "AWS::CloudFront::Distribution", "Properties": {"DistributionConfig": {
        "Comment": "Clarify: the web client and, under /api/, its API",
        "Enabled": True, "HttpVersion": "http2and3", "IPV6Enabled": True, "PriceClass": "PriceClass_100",
        "DefaultRootObject": "index.html",
        "Origins": [
            {"Id": "client", "DomainName": {"Fn::GetAtt": [BUCKET, "RegionalDomainName"]},
             "S3OriginConfig": {"OriginAccessIdentity": ""}, "OriginAccessControlId": {"Fn::GetAtt": [OAC, "Id"]}},
            {"Id": "api", "DomainName": {"Fn::Sub": f"${{{api}}}.execute-api.${{AWS::Region}}.amazonaws.com"},
             "OriginPath": f"/{stage}",
             "CustomOriginConfig": {"OriginProtocolPolicy": "https-only", "OriginSSLProtocols": ["TLSv1.2"]}},
        ],
        "DefaultCacheBehavior": {
            "TargetOriginId": "client", "ViewerProtocolPolicy": "redirect-to-https", "Compress": True,
            "AllowedMethods": ["GET", "HEAD"], "CachedMethods": ["GET", "HEAD"],
            "CachePolicyId": {"Ref": CACHE_POLICY}, "ResponseHeadersPolicyId": headers},
        "CacheBehaviors": [{
            "PathPattern": API_PATH, "TargetOriginId": "api", "ViewerProtocolPolicy": "https-only",
            "Compress": True,
            "AllowedMethods": ["GET", "HEAD", "OPTIONS", "PUT", "PATCH", "POST", "DELETE"],
            "CachedMethods": ["GET", "HEAD"],
            "CachePolicyId": CACHING_DISABLED, "OriginRequestPolicyId": ALL_VIEWER_EXCEPT_HOST,
            "ResponseHeadersPolicyId": headers}],
    }}}


def outputs() -> dict[str, Any]:
    return {
        "ClientUrl": {"Description": "The web client and, under /api/, the API (one origin)",
                      "Value": {"Fn::Sub": f"https://${{{DISTRIBUTION}.DomainName}}"}},
        "ClientBucketName": {"Description": "scripts/deploy-client uploads the client here",
                             "Value": {"Ref": BUCKET}},
    }


# ------------------------------------------------------------------ the API's side
def cors_origins() -> dict[str, Any]:
    """The API function's CLARIFY_CORS_ORIGINS, from the stack parameter."""
    return {"Fn::Join": [",", {"Ref": ALLOWED_ORIGINS}]}


def preflight_method() -> dict[str, Any]:
    """Each route's OPTIONS: a mock (no authorizer, no function) answering 204, with the allow headers only
    when the request's Origin is one of AllowedOrigins (the same headers as cors.preflight_headers)."""
    sets = "\n".join(
        f"#set($context.responseOverride.header.{name} = \"{value}\")"
        for name, value in (("Access-Control-Allow-Methods", ", ".join(cors.METHODS)),
                            ("Access-Control-Allow-Headers", ", ".join(cors.HEADERS)),
                            ("Access-Control-Max-Age", str(cors.MAX_AGE)), ("Vary", "Origin")))
    template = {"Fn::Join": ["", [
        "#set($origin = $input.params().header.get('Origin'))\n"
        "#if(\"$!origin\" == \"\")#set($origin = $input.params().header.get('origin'))#end\n"
        "#set($allowed = \",", cors_origins(), ",\")\n"
        "#if(\"$!origin\" != \"\" && !$origin.contains(\",\") && $allowed.contains(\",$origin,\"))\n"
        "#set($context.responseOverride.header.Access-Control-Allow-Origin = $origin)\n",
        sets, "\n#end\n"]]}
    return {
        "consumes": ["application/json"], "produces": ["application/json"],
        "responses": {"204": {"description": "CORS preflight"}},
        "x-amazon-apigateway-integration": {
            "type": "mock", "passthroughBehavior": "when_no_match",
            "requestTemplates": {"application/json": '{"statusCode": 204}'},
            "responses": {"default": {"statusCode": "204",
                                      "responseTemplates": {"application/json": template}}}},
    }
