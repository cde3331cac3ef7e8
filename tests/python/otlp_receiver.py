"""An OTLP receiver for the tests (run by tests/tests/otel.rs): OTLP/HTTP with protobuf bodies
and OTLP/gRPC, decoded with the official protocol definitions (PyPI `opentelemetry-proto`), on
free loopback ports. Everything it receives is appended to a JSON-lines file, one line per
export request: {"signal": "traces"|"metrics", "protocol": "http"|"grpc", "request": {...}}.

Usage: python3 otlp_receiver.py OUTPUT_FILE
Prints `ready HTTP_PORT GRPC_PORT` once both listen; runs until killed.
"""

import json
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

output = sys.argv[1]
lock = threading.Lock()


def keep(signal, protocol, request):
    line = json.dumps({"signal": signal, "protocol": protocol, "request": MessageToDict(request)})
    with lock, open(output, "a") as f:
        f.write(line + "\n")


class Http(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path == "/v1/traces":
            request, response = trace_service_pb2.ExportTraceServiceRequest(), trace_service_pb2.ExportTraceServiceResponse()
            signal = "traces"
        elif self.path == "/v1/metrics":
            request, response = metrics_service_pb2.ExportMetricsServiceRequest(), metrics_service_pb2.ExportMetricsServiceResponse()
            signal = "metrics"
        else:
            self.send_response(404)
            self.end_headers()
            return
        request.ParseFromString(body)
        keep(signal, "http", request)
        payload = response.SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


class Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        keep("traces", "grpc", request)
        return trace_service_pb2.ExportTraceServiceResponse()


class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def Export(self, request, context):
        keep("metrics", "grpc", request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


http = ThreadingHTTPServer(("127.0.0.1", 0), Http)
threading.Thread(target=http.serve_forever, daemon=True).start()
server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
grpc_port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(f"ready {http.server_address[1]} {grpc_port}", flush=True)
server.wait_for_termination()
