"""The Hub: a model the token may not read, a Hub the node cannot reach, offline mode without a cached copy.

The repository id is read from the URL or the message; `dsv4ctl.diagnosis.answers` adds the `hf` commands for it.
"""

from __future__ import annotations

from dsv4ctl.catalogue.signature import Signature

_REPO_URL = r"https?://(?P<host>[\w.-]+)/(?:api/models/)?(?P<repo>[\w.-]+/[\w.-]+)"

FAMILIES: tuple[Signature, ...] = (
    Signature(
        id="hub_access_denied",
        severity="critical",
        tier=1,
        title="The Hub refused to serve {repo_or_model}: no token, a wrong token, or the licence not accepted",
        meaning=(
            "The Hub answered {status} for {repo_or_model}. A gated model (DeepSeek's, Meta's, Google's) is served only "
            "to a token of an account that accepted its licence on the model page; a private one only to its owners. "
            "The server process either had no token (HF_TOKEN is not passed into containers by itself) or one without "
            "access."
        ),
        patterns=(
            # requests (huggingface_hub < 0.2x): "401 Client Error: Unauthorized for url: https://huggingface.co/<repo>/resolve/…"
            rf"(?P<status>40[13]) Client Error: (?:Unauthorized|Forbidden) for url: {_REPO_URL}",
            # huggingface_hub==2.4.0 utils/_http.py:890 "Cannot access gated repo for url {url}."
            rf"Cannot access gated repo for url {_REPO_URL}",
            r"(?P<status>GatedRepoError)",
            r"Access to model (?P<repo>[\w.-]+/[\w.-]+) is restricted",
            r"(?P<status>401) Client Error\.",
        ),
        actions=(
            "Accept the licence on https://huggingface.co/{repo} with the account whose token the server uses",
            "Pass that account's read token to the server process: HF_TOKEN in its environment (docker run -e HF_TOKEN, a "
            "Kubernetes Secret as env), or log in on the node: hf auth login",
            "Check what the token can read: hf auth whoami; hf models info {repo!q}",
            "Or serve a local copy: download it once where a token works (hf download {repo!q}) and pass the directory as the model",
        ),
        source=(
            "huggingface_hub==2.4.0 utils/_http.py:890 (gated), :935 (credentials); requests' HTTPError text (older "
            "huggingface_hub); advice: xorbitsai/inference#433, vllm-project/semantic-router#817"
        ),
    ),
    Signature(
        id="hub_offline_not_cached",
        severity="critical",
        tier=1,
        title="Offline mode is on and the files are not in this node's cache",
        meaning=(
            "HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) forbids any request to the Hub, and the files the model needs are not "
            "in the cache this process reads (HF_HOME / HF_HUB_CACHE, or --download-dir)."
        ),
        patterns=(
            # huggingface_hub==2.4.0 utils/_http.py:295
            r"Cannot reach (?P<url>\S+): offline mode is enabled",
            r"OfflineModeIsEnabled",
            # huggingface_hub==2.4.0 file_download.py:1946
            r"Cannot find the requested files in the disk cache and outgoing traffic has been disabled",
        ),
        actions=(
            "Pass the snapshot directory itself as the model (the path under HF_HOME/hub/models--ORG--NAME/snapshots/), "
            "not the repository id",
            "Check that HF_HOME / HF_HUB_CACHE (and --download-dir) point at the cache the download went to: hf cache ls",
            "Or allow the Hub for the first start: unset HF_HUB_OFFLINE",
        ),
        source="huggingface_hub==2.4.0 utils/_http.py:295, file_download.py:1946; advice: vllm-project/vllm#1910, #4374",
    ),
    Signature(
        id="hub_unreachable",
        severity="critical",
        tier=1,
        title="This node cannot reach {host_or_hub}",
        meaning=(
            "The request to {host_or_hub} did not connect (DNS, a firewall, a proxy or no route), and the files were "
            "not in the local cache."
        ),
        patterns=(
            r"HTTPSConnectionPool\(host='(?P<host>[\w.-]+)', port=[0-9]+\): Max retries exceeded",
            # transformers==5.19.0 utils/hub.py:621
            r"We couldn't connect to '(?P<host>[^']+)' to load",
            r"(?P<host>huggingface\.co)[^\n]{0,80}(?:Temporary failure in name resolution|Name or service not known|"
            r"Connection refused|timed out|Network is unreachable)",
            r"LocalEntryNotFoundError: An error happened while trying to locate the file",
        ),
        actions=(
            "From the node, check the route: curl -sSI https://huggingface.co (a proxy needs HTTPS_PROXY in the server's environment)",
            "Or use a mirror the node can reach (HF_ENDPOINT), or download elsewhere and serve the local directory with HF_HUB_OFFLINE=1",
        ),
        source="transformers==5.19.0 utils/hub.py:621; urllib3's MaxRetryError; advice: QwenLM/Qwen3#556, hiyouga/LlamaFactory#3503",
    ),
    Signature(
        id="model_path_taken_as_hub_id",
        severity="critical",
        tier=1,
        title="The model path {path} does not exist here, so it was taken for a Hub id",
        meaning=(
            "A model argument that is not an existing directory is read as a Hub repository id, and {path} is not a "
            "valid id: the directory is missing on this node or not mounted into the container."
        ),
        patterns=(r"Repo id must be in the form 'repo_name' or 'namespace/repo_name': '(?P<path>[^']+)'",),
        actions=("Check the directory on the node that runs the server: ls -la {path_q}",
                 "In a container, mount it at that path (docker run -v HOST_DIR:{path_q}, or the pod's volumeMounts)"),
        source="huggingface_hub==2.4.0 utils/_validators.py:134; advice: the field's hf_validation_error_local_path_missing reports",
    ),
    Signature(
        id="hub_revision_missing",
        severity="critical",
        tier=1,
        title="The revision asked for does not exist in {repo_or_model}",
        meaning="The Hub (or ModelScope) has no branch, tag or commit of that name in the repository.",
        patterns=(r"RevisionNotFoundError", r"Invalid rev id: (?P<rev>\S+)", r"has no revision: (?P<rev>\S+)"),
        actions=("Pass a revision the repository has (--revision, --tokenizer-revision); list them: hf models info {repo!q}",
                 "Pass a revision the repository has (--revision, --tokenizer-revision); on ModelScope the default branch is master"),
        source="huggingface_hub==2.4.0 utils/_http.py:881; modelscope hub/api.py; advice: vllm-project/vllm#8501, vllm-project/vllm-ascend#829",
    ),
    Signature(
        id="hf_transfer_missing",
        severity="critical",
        tier=1,
        title="HF_HUB_ENABLE_HF_TRANSFER=1 is set but hf_transfer is not installed",
        meaning="Older huggingface_hub releases refuse to download when fast transfer is asked for and its package is missing.",
        patterns=(r"Fast download using 'hf_transfer' is enabled \(HF_HUB_ENABLE_HF_TRANSFER=1\) but 'hf_transfer' package is not available",),
        actions=("Unset HF_HUB_ENABLE_HF_TRANSFER, or install the package: python -m pip install hf_transfer",),
        source="huggingface_hub (< 1.0) file_download.py; huggingface_hub==2.4.0 constants.py:303 deprecates the variable",
    ),
)
