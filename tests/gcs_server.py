"""`gcp-storage-emulator` (2026.7.19) with two behaviours of Google Cloud Storage that
TensorStore, which writes Orbax's arrays, relies on and the emulator lacks:

  * a media download carries the object's generation in `x-goog-generation` (GCS
    sends it with every object read);
  * a download with `ifGenerationNotMatch=G` of an object at generation G answers
    304 Not Modified, one with `ifGenerationMatch=G` of another generation 412
    (TensorStore revalidates its cached OCDBT manifest this way: without them it gets
    the manifest back with no generation and the checkpoint write fails with
    "Malformed StorageGeneration", at the second save of a step directory or so).

Everything else is the emulator's. Same command line:
    python -m tests.gcs_server start --port P --in-memory --default-bucket bucket
"""

from __future__ import annotations

from http import HTTPStatus

from gcp_storage_emulator import server
from gcp_storage_emulator.__main__ import main
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers import objects

_DOWNLOAD = objects.download


def download(request, response, storage, *args, **kwargs):
    """objects.download, with the generation header and the generation conditions."""
    try:
        obj = storage.get_file_obj(request.params["bucket_name"], request.params["object_id"])
    except NotFound:
        response.status = HTTPStatus.NOT_FOUND
        return
    generation = str(obj["generation"])
    if request.query.get("ifGenerationNotMatch", [None])[0] == generation:
        response.status = HTTPStatus.NOT_MODIFIED
        return
    match = request.query.get("ifGenerationMatch", [None])[0]
    if match is not None and match != generation:
        response.status = HTTPStatus.PRECONDITION_FAILED
        return
    response["x-goog-generation"] = generation
    response["x-goog-metageneration"] = str(obj.get("metageneration", "1"))
    _DOWNLOAD(request, response, storage, *args, **kwargs)


# the routes that name the handler, and `objects.get` (?alt=media), which calls it by name
server.HANDLERS = tuple(
    (pattern, {method: download if handler is _DOWNLOAD else handler
               for method, handler in methods.items()})
    for pattern, methods in server.HANDLERS)
objects.download = download

if __name__ == "__main__":
    main()
